"""The distributed_sample_sort expert's CUDA source, run on the host: one process per rank, one OS thread per
CUDA thread (a test harness, not a simulator of the GPU).

It reuses tests/solutions/host_kernel.py's SHIM (threadIdx and blockIdx per thread, `__syncthreads` on std::barrier, the
system-scope atomics and fences of `pkb_block_barrier` on real atomics), adds what the sort kernels use
(`__shared__` as a static: a rank's blocks run one after another in its process, so a static is one block's
shared memory; int atomicMax / atomicMin; bf16 / fp16 to float; L2-only loads of 16-bit values; a yield in
the barrier's spin, since the ranks' threads share two cores), and `HARNESS` forks W rank processes over
buffers, counts and signal pads in shared memory (fork keeps their addresses, so every rank's pointers are
valid in every process). Per call a rank copies its sorted values (sorted in Python, as torch.sort would)
into slot call % 2, then launches the split kernel (which publishes the count) (2 blocks, one after the other, each
through the cross-process barrier), the gather (grid (G, W)) and the merge (G blocks), and writes its output.
The ranks are not otherwise synchronised: calls run back to back on the same buffers, as on a GPU.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from solutions.host_kernel import SHIM, compiler

EXTRA = r"""
#include <sched.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <signal.h>
#define __shared__ static
static inline float __bfloat162float(__nv_bfloat16 h) { return bf2f(h); }
static inline float __half2float(__half h) { return (float)h.h; }
static inline __nv_bfloat16 __ldcg(const __nv_bfloat16* p) { std::atomic_thread_fence(std::memory_order_seq_cst); __nv_bfloat16 v; std::memcpy(&v, (const void*)p, 2); return v; }
static inline __half __ldcg(const __half* p) { std::atomic_thread_fence(std::memory_order_seq_cst); __half v; std::memcpy(&v, (const void*)p, 2); return v; }
static inline int atomicMax(int* a, int v) { int old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) { } return old; }
static inline int atomicMin(int* a, int v) { int old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    while (old > v && !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) { } return old; }
"""

HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <string>

template <typename F>
static void launch(unsigned gx, unsigned gy, unsigned threads, F body) {   // blocks one after another
    gridDim.x = gx; gridDim.y = gy; blockDim.x = threads;
    for (unsigned by = 0; by < gy; ++by) for (unsigned bx = 0; bx < gx; ++bx) {
        std::barrier<> bar(threads);
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t)
            ts.emplace_back([&, t]() { threadIdx.x = t; blockIdx.x = bx; blockIdx.y = by; block_bar = &bar; body(); });
        for (auto& th : ts) th.join();
    }
}

static void* shared_zeros(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(2); }
    memset(p, 0, bytes);
    return p;
}

int main(int argc, char** argv) {
    // W split_threads copy_threads blocks dtype calls cap in_path out_prefix
    int W = atoi(argv[1]), split_threads = atoi(argv[2]), threads = atoi(argv[3]), G = atoi(argv[4]);
    std::string dtype = argv[5];
    int calls = atoi(argv[6]);
    long long cap = atoll(argv[7]);
    const char* in_path = argv[8]; std::string out_prefix = argv[9];
    int elem = dtype == "f32" ? 4 : 2;
    long long V = 16 / elem;
    long long* ptrs = (long long*)shared_zeros(W * 8);
    long long* count_ptrs = (long long*)shared_zeros(W * 8);
    unsigned long long* pads = (unsigned long long*)shared_zeros(W * 8);
    for (int r = 0; r < W; ++r) {
        unsigned char* data = (unsigned char*)shared_zeros(2 * cap * elem + 256);
        memset(data, 0xAB, 2 * cap * elem);   // garbage
        ptrs[r] = (long long)data;
        count_ptrs[r] = (long long)shared_zeros(64);
        pads[r] = (unsigned long long)shared_zeros((2 * W + 64) * 4);
    }
    std::vector<pid_t> kids;
    for (int rank = 0; rank < W; ++rank) {
        pid_t pid = fork();
        if (pid) { kids.push_back(pid); continue; }
        FILE* fin = fopen(in_path, "rb");
        std::vector<long long> meta(2 * W), info(4);
        for (int c = 0; c < calls; ++c) {
            const int slot = c % 2;
            long long n = 0;
            std::vector<unsigned char> mine;
            for (int r = 0; r < W; ++r) {   // every rank's (count, sorted values); keep one's own
                long long m; if (fread(&m, 8, 1, fin) != 1) exit(3);
                std::vector<unsigned char> v(m * elem);
                if (m && fread(v.data(), elem, m, fin) != (size_t)m) exit(3);
                if (r == rank) { n = m; mine = v; }
            }
            if (n <= cap) memcpy((unsigned char*)ptrs[rank] + slot * cap * elem, mine.data(), n * elem);
            std::atomic_thread_fence(std::memory_order_seq_cst);
            launch(2, 1, split_threads, [&]() {
                if (elem == 4) sort_split_f32(ptrs, pads, count_ptrs, meta.data(), info.data(), n, rank, W, slot, cap);
                else if (dtype == "bf16") sort_split_bf16(ptrs, pads, count_ptrs, meta.data(), info.data(), n, rank, W, slot, cap);
                else sort_split_f16(ptrs, pads, count_ptrs, meta.data(), info.data(), n, rank, W, slot, cap);
            });
            std::vector<unsigned char> scratch((cap + W * V) * elem + 16, 0xCD);
            unsigned char* sc = scratch.data() + ((16 - ((unsigned long long)scratch.data() & 15)) & 15);
            launch(G, W, threads, [&]() {
                if (elem == 4) sort_gather_f32(ptrs, meta.data(), (float*)sc, rank, W, slot, cap);
                else if (dtype == "bf16") sort_gather_bf16(ptrs, meta.data(), (__nv_bfloat16*)sc, rank, W, slot, cap);
                else sort_gather_f16(ptrs, meta.data(), (__half*)sc, rank, W, slot, cap);
            });
            long long length = info[0];
            std::vector<unsigned char> out(length * elem + 1, 0xEE);
            if (length) launch(G, 1, threads, [&]() {
                if (elem == 4) sort_merge_f32(meta.data(), (const float*)sc, (float*)out.data(), W);
                else if (dtype == "bf16") sort_merge_bf16(meta.data(), (const __nv_bfloat16*)sc, (__nv_bfloat16*)out.data(), W);
                else sort_merge_f16(meta.data(), (const __half*)sc, (__half*)out.data(), W);
            });
            std::string path = out_prefix + "." + std::to_string(c) + "." + std::to_string(rank);
            FILE* fout = fopen(path.c_str(), "wb");
            fwrite(info.data(), 8, 3, fout);
            fwrite(meta.data(), 8, 2 * W, fout);
            fwrite(out.data(), elem, length, fout);
            fclose(fout);
        }
        exit(0);
    }
    for (size_t done = 0; done < kids.size(); ++done) {   // a rank that fails leaves its peers in a barrier: end them
        int status = 0;
        waitpid(-1, &status, 0);
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            for (pid_t pid : kids) kill(pid, SIGKILL);
            fprintf(stderr, "a rank failed\n");
            return 5;
        }
    }
    for (int r = 0; r < W; ++r) for (int i = 0; i < 2 * W; ++i) if (((unsigned*)pads[r])[i]) { fprintf(stderr, "pad not zero\n"); return 4; }
    return 0;
}
"""


def build(kernel_source: str, directory: Path) -> Path:
    """The harness around `kernel_source` (its #include lines dropped: the shim stands for them)."""
    shim = SHIM.replace("#define __launch_bounds__(a, b)", "#define __launch_bounds__(...)")
    shim = shim.replace("__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; }",
                        "__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); if (cmp != cmp_in) sched_yield(); return cmp; }")
    shim = shim.replace("unsigned atomicCAS_system(unsigned* a, unsigned cmp, unsigned val) {",
                        "unsigned atomicCAS_system(unsigned* a, unsigned cmp, unsigned val) { const unsigned cmp_in = cmp;")
    assert "cmp_in" in shim and "__launch_bounds__(...)" in shim
    source = shim + EXTRA + re.sub(r"#include <[^>]+>\n", "", kernel_source) + HARNESS
    (directory / "sort_harness.cpp").write_text(source)
    binary = directory / "sort_harness"
    subprocess.run([compiler(), "-std=c++20", "-O1", "-pthread", "-w", "-o", str(binary),
                    str(directory / "sort_harness.cpp")], check=True, capture_output=True, text=True, timeout=300)
    return binary


def run(binary: Path, world: int, split_threads: int, threads: int, blocks: int, dtype: str, cap: int,
        calls: list[list[bytes]], elem: int, directory: Path) -> list[list[tuple[list[int], list[int], bytes]]]:
    """calls[c][r]: rank r's sorted values (raw bytes) in call c. Returns, per call and rank, (info = [length,
    largest count, total], meta = the 2W split counts, the output's raw bytes)."""
    import struct

    payload = b"".join(struct.pack("<q", len(v) // elem) + v for call in calls for v in call)
    (directory / "in.bin").write_bytes(payload)
    prefix = directory / "out"
    subprocess.run([str(binary), str(world), str(split_threads), str(threads), str(blocks), dtype, str(len(calls)),
                    str(cap), str(directory / "in.bin"), str(prefix)], check=True, capture_output=True, timeout=120)
    results = []
    for c in range(len(calls)):
        row = []
        for r in range(world):
            raw = Path(f"{prefix}.{c}.{r}").read_bytes()
            info = list(struct.unpack("<3q", raw[:24]))
            meta = list(struct.unpack(f"<{2 * world}q", raw[24:24 + 16 * world]))
            row.append((info, meta, raw[24 + 16 * world:]))
        results.append(row)
    return results
