"""The quantized_grad_allreduce and zero2_optimizer_shard_grad experts' CUDA sources, run on the host: one OS
thread per CUDA thread.

A test harness, not a simulator of the GPU: `SHIM` gives the source what it uses (threadIdx and blockIdx
per thread, `__syncthreads` and `__shfl_xor_sync` on std::barrier, the system-scope atomics and fences of
`pkb_block_barrier` on real atomics over host memory, `__ldcg` as a fenced load, IEEE host arithmetic for
`__fdiv_rn` and `__fmaf_rn`, bf16 by round to nearest even); `HARNESS` launches every rank's grid at
once (W ranks x G blocks x T threads), over symmetric buffers and signal pads in host memory, call after
call on the same buffers, and checks that the signal pads return to zero after every call. Small grids
(T = 64: two warps a block) keep the thread count in the hundreds. Needs g++ with C++20's <barrier>.

`build_library` (at the end) is the simpler case, for kernels without block-level synchronisation (the
physicsnemo_distributed_rfft expert's transpose): the source becomes a shared library whose launchers run
a grid's threads one after another on the calling thread, so a test can launch it from Python (ctypes) in
place of `compile_cuda`, on CPU tensors, one Python thread per rank.

`MOE_HARNESS` and `MOE_POST_HARNESS` do what `HARNESS` does for the MoE experts' two kernels each (moe_all2all_primitive,
moe_post_all2all): every rank on its own host thread, its publish grid's threads concurrent (the in-kernel
barrier is real), its second kernel's threads one after another (it has no barrier); the expert's source and
a wrong variant of it in one binary (`with_variant`).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

SHIM = r"""
// Host shim: runs the CUDA kernel source with one OS thread per CUDA thread (a test harness only).
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstddef>
#include <algorithm>
using std::size_t;
struct dim3s { unsigned x = 0, y = 0, z = 0; };
thread_local dim3s threadIdx, blockIdx;
dim3s gridDim, blockDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
static inline float __double2float_rn(double d) { return (float)d; }
template <typename T> static inline T __ldcg(const T* p) { std::atomic_thread_fence(std::memory_order_seq_cst); return *(const volatile T*)p; }
static inline uint4 __ldcg(const uint4* p) { std::atomic_thread_fence(std::memory_order_seq_cst); uint4 v; std::memcpy(&v, (const void*)p, 16); return v; }
static inline uint2 __ldcg(const uint2* p) { std::atomic_thread_fence(std::memory_order_seq_cst); uint2 v; std::memcpy(&v, (const void*)p, 8); return v; }
static inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline unsigned atomicCAS_system(unsigned* a, unsigned cmp, unsigned val) {
    __atomic_compare_exchange_n(a, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; }
// bf16 on the host: round to nearest even from float
struct __nv_bfloat16 { unsigned short b; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct float2 { float x, y; };
static inline float bf2f(__nv_bfloat16 h) { return __uint_as_float(((unsigned)h.b) << 16); }
static inline __nv_bfloat16 f2bf(float f) { unsigned u = __float_as_uint(f); u += 0x7fff + ((u >> 16) & 1); return __nv_bfloat16{(unsigned short)(u >> 16)}; }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{bf2f(h.x), bf2f(h.y)}; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{f2bf(a), f2bf(b)}; }
struct __half { _Float16 h; };
struct __half2 { __half x, y; };
static inline float2 __half22float2(__half2 h) { return float2{(float)h.x.h, (float)h.y.h}; }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half{(_Float16)a}, __half{(_Float16)b}}; }
// block and warp synchronisation
thread_local std::barrier<>* block_bar;
struct Warp { std::barrier<>* bar; float fv[32]; };
thread_local Warp* my_warp;
static inline void __syncthreads() { block_bar->arrive_and_wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int offset) {
    int lane = threadIdx.x & 31;
    my_warp->bar->arrive_and_wait();
    my_warp->fv[lane] = v;
    my_warp->bar->arrive_and_wait();
    float r = my_warp->fv[lane ^ offset];
    return r;
}
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __restrict__
"""

HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <string>

int main(int argc, char** argv) {
    int W = atoi(argv[1]), G = atoi(argv[2]), T = atoi(argv[3]);
    long long nb = atoll(argv[4]);
    std::string dtype = argv[5];
    int calls = atoi(argv[6]), two_shot = atoi(argv[7]);
    const char* in_path = argv[8]; const char* out_path = argv[9];
    long long n = nb * 128;
    int elem = dtype == "f32" ? 4 : 2;
    long long slot_bytes = n + ((nb * 4 + 15) / 16) * 16 + n * elem;
    std::vector<unsigned char*> bufs(W); std::vector<unsigned*> pads(W);
    std::vector<long long> ptrs(W); std::vector<unsigned long long> padptrs(W);
    for (int r = 0; r < W; ++r) {
        bufs[r] = (unsigned char*)aligned_alloc(256, ((2 * slot_bytes + 255) / 256) * 256);
        memset(bufs[r], 0xAB, 2 * slot_bytes);  // garbage
        pads[r] = (unsigned*)calloc(G * W + 64, 4);
        ptrs[r] = (long long)bufs[r]; padptrs[r] = (unsigned long long)pads[r];
    }
    FILE* fin = fopen(in_path, "rb"); FILE* fout = fopen(out_path, "wb");
    std::vector<unsigned char*> xs(W), outs(W);
    for (int r = 0; r < W; ++r) { xs[r] = (unsigned char*)aligned_alloc(256, ((n * elem + 255) / 256) * 256); outs[r] = (unsigned char*)aligned_alloc(256, ((n * elem + 255) / 256) * 256); }
    gridDim.x = G; blockDim.x = T;
    for (int c = 0; c < calls; ++c) {
        for (int r = 0; r < W; ++r) { if (fread(xs[r], elem, n, fin) != (size_t)n) return 2; memset(outs[r], 0xCD, n * elem); }
        std::vector<std::barrier<>*> bbar; std::vector<Warp*> warps;
        std::vector<std::thread> threads;
        for (int r = 0; r < W; ++r) for (int b = 0; b < G; ++b) {
            auto* bb = new std::barrier<>(T); bbar.push_back(bb);
            std::vector<Warp*> ws;
            for (int w = 0; w < T / 32; ++w) { Warp* wp = new Warp; wp->bar = new std::barrier<>(32); ws.push_back(wp); warps.push_back(wp); }
            for (int t = 0; t < T; ++t) {
                Warp* wp = ws[t / 32];
                threads.emplace_back([=, &ptrs, &padptrs, &xs, &outs]() {
                    threadIdx.x = t; blockIdx.x = b; block_bar = bb; my_warp = wp;
                    if (dtype == "f32")
                        quant_allreduce_f32((const float*)xs[r], (float*)outs[r], ptrs.data(), padptrs.data(), r, W, nb, slot_bytes, c % 2, two_shot);
                    else
                        quant_allreduce_bf16((const __nv_bfloat16*)xs[r], (__nv_bfloat16*)outs[r], ptrs.data(), padptrs.data(), r, W, nb, slot_bytes, c % 2, two_shot);
                });
            }
        }
        for (auto& th : threads) th.join();
        for (int r = 0; r < W; ++r) fwrite(outs[r], elem, n, fout);
        for (int r = 0; r < W; ++r) for (int i = 0; i < G * W; ++i) if (pads[r][i]) { fprintf(stderr, "pad not zero\n"); return 3; }
    }
    fclose(fout);
    return 0;
}
"""


ZERO2_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

// zero2_optimizer_shard_grad's kernel: argv W G T P S calls in out. Per call the input holds 7 doubles
// (grad_scale, lr, beta1, beta2, eps, bc1, bc2), 3 int64 (o1, o2, o3), then per rank its flat gradients (P
// floats), the parameters (P floats, split into W1, b1, W2, b2 at o1, o2, o3, each its own allocation), m (S)
// and v (S). The output per call and rank: the gradient shard (S), the parameters (P), m (S), v (S).
// Every rank runs all its calls as one stream would: its G x T threads finish call c before one of them
// writes call c + 1's gradients into the rank's buffer (its backward) and before call c + 1 starts; the
// ranks are not synchronised with each other between calls (only by the kernel's own barriers), and the
// buffers and pads persist (one slot): a fast rank's next backward races a slow peer's reads.
int main(int argc, char** argv) {
    int W = atoi(argv[1]), G = atoi(argv[2]), T = atoi(argv[3]);
    long long P = atoll(argv[4]), S = atoll(argv[5]);
    int calls = atoi(argv[6]);
    FILE* fin = fopen(argv[7], "rb"); FILE* fout = fopen(argv[8], "wb");
    long long poff = ((P + 3) / 4) * 4;
    std::vector<float*> bufs(W); std::vector<unsigned*> pads(W);
    std::vector<long long> ptrs(W); std::vector<unsigned long long> padptrs(W);
    for (int r = 0; r < W; ++r) {
        bufs[r] = (float*)aligned_alloc(256, (((poff + S) * 4 + 255) / 256) * 256);
        memset(bufs[r], 0xFF, (poff + S) * 4);  // garbage (NaN)
        pads[r] = (unsigned*)calloc(G * W + 64, 4);
        ptrs[r] = (long long)bufs[r]; padptrs[r] = (unsigned long long)pads[r];
    }
    struct Call { double h[7]; long long o[4], len[4]; std::vector<std::vector<float>> grads, m, v, g;
                  std::vector<std::vector<std::vector<float>>> prm; };
    std::vector<Call> cs(calls);
    for (auto& c : cs) {
        long long o[3];
        if (fread(c.h, 8, 7, fin) != 7 || fread(o, 8, 3, fin) != 3) return 2;
        c.o[0] = 0; c.o[1] = o[0]; c.o[2] = o[1]; c.o[3] = o[2];
        c.len[0] = o[0]; c.len[1] = o[1] - o[0]; c.len[2] = o[2] - o[1]; c.len[3] = P - o[2];
        c.grads.assign(W, std::vector<float>(P)); c.m.assign(W, std::vector<float>(S));
        c.v.assign(W, std::vector<float>(S)); c.g.assign(W, std::vector<float>(S, __uint_as_float(0xFFFFFFFFu)));
        c.prm.assign(W, std::vector<std::vector<float>>(4));
        for (int r = 0; r < W; ++r) {
            if (fread(c.grads[r].data(), 4, P, fin) != (size_t)P) return 2;
            for (int t = 0; t < 4; ++t) {
                c.prm[r][t].resize(c.len[t] + 1);
                if (fread(c.prm[r][t].data(), 4, c.len[t], fin) != (size_t)c.len[t]) return 2;
            }
            if (fread(c.m[r].data(), 4, S, fin) != (size_t)S || fread(c.v[r].data(), 4, S, fin) != (size_t)S) return 2;
        }
    }
    gridDim.x = G; blockDim.x = T;
    std::vector<std::thread> threads;
    for (int r = 0; r < W; ++r) {
        auto* stream = new std::barrier<>(G * T);   // the rank's stream order between calls
        for (int b = 0; b < G; ++b) {
            auto* bb = new std::barrier<>(T);
            for (int t = 0; t < T; ++t) {
                threads.emplace_back([=, &cs, &ptrs, &padptrs, &bufs]() {
                    threadIdx.x = t; blockIdx.x = b; block_bar = bb;
                    for (auto& c : cs) {
                        if (b == 0 && t == 0) memcpy(bufs[r], c.grads[r].data(), P * 4);  // the backward
                        stream->arrive_and_wait();
                        zero2_adam_step(ptrs.data(), padptrs.data(), r, W, S, poff, c.prm[r][0].data(),
                                        c.prm[r][1].data(), c.prm[r][2].data(), c.prm[r][3].data(), c.o[1], c.o[2],
                                        c.o[3], c.m[r].data(), c.v[r].data(), c.g[r].data(), c.h[0], c.h[1], c.h[2],
                                        c.h[3], c.h[4], c.h[5], c.h[6]);
                        stream->arrive_and_wait();
                    }
                });
            }
        }
    }
    for (auto& th : threads) th.join();
    for (auto& c : cs) for (int r = 0; r < W; ++r) {
        fwrite(c.g[r].data(), 4, S, fout);
        for (int t = 0; t < 4; ++t) fwrite(c.prm[r][t].data(), 4, c.len[t], fout);
        fwrite(c.m[r].data(), 4, S, fout); fwrite(c.v[r].data(), 4, S, fout);
    }
    for (int r = 0; r < W; ++r) for (int i = 0; i < G * W; ++i) if (pads[r][i]) { fprintf(stderr, "pad not zero\n"); return 3; }
    fclose(fout);
    return 0;
}
"""


def run_zero2(binary: Path, world: int, blocks: int, threads: int, p: int, calls: int, inputs: bytes,
              directory: Path) -> bytes:
    """ZERO2_HARNESS: every call's every rank's (gradient shard, parameters, m, v), raw fp32, call-major."""
    return execute(binary, [world, blocks, threads, p, p // world, calls], inputs, directory)


def compiler() -> str | None:
    return shutil.which("g++")


def host_dtype(dtype) -> str:
    """The harnesses' name of a dtype (a torch dtype or its name): f32, bf16 or f16."""
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[str(dtype).removeprefix("torch.")]


def compile_harness(source: str, directory: Path) -> Path:
    """`source` (a shim, the kernels, a harness's main()) built into `directory`/harness."""
    (directory / "harness.cpp").write_text(source)
    binary = directory / "harness"
    subprocess.run([compiler(), "-std=c++20", "-O0", "-pthread", "-w", "-o", str(binary), str(directory / "harness.cpp")],
                   check=True, capture_output=True, timeout=300)
    return binary


def execute(binary: Path, arguments: list, inputs: bytes, directory: Path, after: tuple = ()) -> bytes:
    """Run a harness: `arguments`, the input file (holding `inputs`), the output file, then `after`; the output."""
    (directory / "in.bin").write_bytes(inputs)
    subprocess.run([str(binary), *map(str, arguments), str(directory / "in.bin"), str(directory / "out.bin"),
                    *map(str, after)], check=True, capture_output=True, timeout=300)
    return (directory / "out.bin").read_bytes()


def build(kernel_source: str, directory: Path, harness: str = HARNESS) -> Path:
    """The harness around `kernel_source` (its #include lines dropped: the shim stands for them); `harness`
    the main() that launches it (HARNESS: the quantised all-reduce's; ZERO2_HARNESS: the ZeRO-2 step's)."""
    return compile_harness(SHIM + re.sub(r"#include <[^>]+>\n", "", kernel_source) + harness, directory)


def run(binary: Path, world: int, blocks: int, threads: int, nb: int, dtype: str, calls: int, two_shot: bool,
        inputs: bytes, directory: Path) -> bytes:
    """Every call's every rank's output (raw bytes, call-major), from every call's every rank's input."""
    return execute(binary, [world, blocks, threads, nb, dtype, calls, int(two_shot)], inputs, directory)


# -- a kernel source as a host library, called per launch (kernels without block-level synchronisation) -------

LIBRARY_SHIM = r"""
// Host shim for kernels without block-level synchronisation (no __syncthreads, shuffles or shared memory):
// a launch runs every thread of its grid one after another, on the calling host thread.
#include <cstdint>
#include <cstddef>
struct dim3s { unsigned x = 0, y = 0, z = 0; };
thread_local dim3s threadIdx, blockIdx, gridDim, blockDim;
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct double2 { double x, y; };
struct uint4 { unsigned x, y, z, w; };
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __restrict__
"""

_CTYPES = {"int": "c_int", "long long": "c_longlong", "unsigned long long": "c_ulonglong", "float": "c_float",
           "double": "c_double"}


def build_library(kernel_source: str, signatures: dict[str, list[str]], directory: Path):
    """`kernel_source` as a shared library with a launcher `launch_<kernel>(grid_x, grid_y, block_x, <the kernel's
    parameters>)` per `extern "C"` kernel in `signatures` ({name: parameter declarations}); returns the ctypes
    library, argument types set (pointers as addresses)."""
    import ctypes

    launchers = []
    for name, params in signatures.items():
        names = [p.split()[-1].lstrip("*") for p in params]
        launchers.append(
            f'extern "C" void launch_{name}(unsigned gx, unsigned gy, unsigned bx, {", ".join(params)}) {{\n'
            f"    gridDim = dim3s{{gx, gy, 1}}; blockDim = dim3s{{bx, 1, 1}};\n"
            f"    for (unsigned y = 0; y < gy; ++y)\n"
            f"    for (unsigned b = 0; b < gx; ++b)\n"
            f"    for (unsigned t = 0; t < bx; ++t) {{\n"
            f"        blockIdx = dim3s{{b, y, 0}}; threadIdx = dim3s{{t, 0, 0}};\n"
            f"        {name}({', '.join(names)});\n    }}\n}}\n")
    source = LIBRARY_SHIM + re.sub(r"#include <[^>]+>\n", "", kernel_source) + "\n".join(launchers)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kernels.cpp").write_text(source)
    library = directory / "kernels.so"
    subprocess.run([compiler(), "-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-o", str(library),
                    str(directory / "kernels.cpp")], check=True, capture_output=True, timeout=300)
    lib = ctypes.CDLL(str(library))
    for name, params in signatures.items():
        types = []
        for p in params:
            ctype = " ".join(p.split()[:-1]).replace("const ", "").strip()
            types.append(ctypes.c_void_p if "*" in p else getattr(ctypes, _CTYPES[ctype]))
        getattr(lib, f"launch_{name}").argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint] + types
    return lib


# -- the moe_all2all_primitive expert's two kernels (publish with its in-kernel barrier, then pull) ----------------

MOE_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <string>

// One rank's calls, on its own host thread (its stream): per call the publish grid (G blocks of T threads,
// all concurrent: its barrier waits for the other ranks' publishes) and then the pull grid (BX x W blocks;
// no barrier inside, so its threads run one after another on this thread). Ranks race each other across
// calls, as streams on different GPUs do.
template <typename T>
static void rank_main(int r, int W, int G, int Tn, int BX, int calls, long long rows, long long cols,
                      long long slot_bytes, long long* ptrs, unsigned long long* pads,
                      std::vector<std::vector<long long>>* counts, std::vector<std::vector<unsigned char>>* xs,
                      std::vector<std::vector<unsigned char>>* outs,
                      void (*publish)(const T*, const long long*, const long long*, const unsigned long long*, int, int, long long, long long, long long),
                      void (*pull)(const long long*, const long long*, T*, int, int, long long, long long, long long, long long)) {
    for (int c = 0; c < calls; ++c) {
        const long long* send = (*counts)[c * W + r].data();
        const long long* recv = send + W;
        const T* x = (const T*)(*xs)[c * W + r].data();
        std::vector<std::thread> threads;
        std::vector<std::barrier<>*> bars;
        for (int b = 0; b < G; ++b) {
            auto* bb = new std::barrier<>(Tn); bars.push_back(bb);
            for (int t = 0; t < Tn; ++t)
                threads.emplace_back([=]() {
                    threadIdx.x = t; blockIdx.x = b; blockIdx.y = 0; gridDim.x = G; gridDim.y = 1; blockDim.x = Tn;
                    block_bar = bb;
                    publish(x, send, ptrs, pads, r, W, rows * cols, slot_bytes, c % 2);
                });
        }
        for (auto& th : threads) th.join();
        for (auto* bb : bars) delete bb;
        long long total = 0;
        for (int s = 0; s < W; ++s) total += recv[s];
        T* out = (T*)(*outs)[c * W + r].data();
        gridDim.x = BX; gridDim.y = W; blockDim.x = Tn;
        for (int y = 0; y < W; ++y) for (int b = 0; b < BX; ++b) for (int t = 0; t < Tn; ++t) {
            threadIdx.x = t; blockIdx.x = b; blockIdx.y = y;
            pull(ptrs, recv, out, r, W, cols, slot_bytes, c % 2, rows);
        }
    }
}

int main(int argc, char** argv) {
    int W = atoi(argv[1]), G = atoi(argv[2]), Tn = atoi(argv[3]), BX = atoi(argv[4]);
    std::string dtype = argv[5];
    int calls = atoi(argv[6]);
    long long rows = atoll(argv[7]), cols = atoll(argv[8]);
    const char* in_path = argv[9]; const char* out_path = argv[10];
    const bool bad = atoi(argv[11]) != 0;   // the variant's kernels (bad_moe_*) instead of the expert's
    int elem = dtype == "f32" ? 4 : 2;
    long long slot_bytes = 512 + ((rows * cols * elem + 15) / 16) * 16;
    std::vector<unsigned char*> bufs(W); std::vector<unsigned*> pads(W);
    std::vector<long long> ptrs(W); std::vector<unsigned long long> padptrs(W);
    for (int r = 0; r < W; ++r) {
        bufs[r] = (unsigned char*)aligned_alloc(256, ((2 * slot_bytes + 255) / 256) * 256);
        memset(bufs[r], 0xAB, 2 * slot_bytes);  // garbage
        pads[r] = (unsigned*)calloc(G * W + 64, 4);
        ptrs[r] = (long long)bufs[r]; padptrs[r] = (unsigned long long)pads[r];
    }
    // input: per call, per rank: send counts (W int64), recv counts (W int64), rows x cols elements
    FILE* fin = fopen(in_path, "rb");
    std::vector<std::vector<long long>> counts(calls * W, std::vector<long long>(2 * W));
    std::vector<std::vector<unsigned char>> xs(calls * W), outs(calls * W);
    for (int i = 0; i < calls * W; ++i) {
        if (fread(counts[i].data(), 8, 2 * W, fin) != (size_t)(2 * W)) return 2;
        xs[i].resize(rows * cols * elem + 16);
        if (fread(xs[i].data(), elem, rows * cols, fin) != (size_t)(rows * cols)) return 2;
        long long total = 0;
        for (int s = 0; s < W; ++s) total += counts[i][W + s];
        outs[i].assign(total * cols * elem + 16, 0xCD);
    }
    fclose(fin);
    std::vector<std::thread> ranks;
    for (int r = 0; r < W; ++r) {
        if (dtype == "f32")
            ranks.emplace_back(rank_main<float>, r, W, G, Tn, BX, calls, rows, cols, slot_bytes, ptrs.data(), padptrs.data(),
                               &counts, &xs, &outs, bad ? bad_moe_publish_f32 : moe_publish_f32,
                               bad ? bad_moe_pull_f32 : moe_pull_f32);
        else if (dtype == "bf16")
            ranks.emplace_back(rank_main<__nv_bfloat16>, r, W, G, Tn, BX, calls, rows, cols, slot_bytes, ptrs.data(),
                               padptrs.data(), &counts, &xs, &outs, bad ? bad_moe_publish_bf16 : moe_publish_bf16,
                               bad ? bad_moe_pull_bf16 : moe_pull_bf16);
        else
            ranks.emplace_back(rank_main<__half>, r, W, G, Tn, BX, calls, rows, cols, slot_bytes, ptrs.data(),
                               padptrs.data(), &counts, &xs, &outs, bad ? bad_moe_publish_f16 : moe_publish_f16,
                               bad ? bad_moe_pull_f16 : moe_pull_f16);
    }
    for (auto& th : ranks) th.join();
    for (int r = 0; r < W; ++r) for (int i = 0; i < G * W; ++i) if (pads[r][i]) { fprintf(stderr, "pad not zero\n"); return 3; }
    FILE* fout = fopen(out_path, "wb");
    for (int i = 0; i < calls * W; ++i) {
        long long total = 0;
        for (int s = 0; s < W; ++s) total += counts[i][W + s];
        fwrite(outs[i].data(), elem, total * cols, fout);
    }
    fclose(fout);
    return 0;
}
"""


def _moe_shim() -> str:
    """SHIM with per-thread grid and block sizes (ranks run different kernels at once) and a failed
    compare-and-swap that yields (hundreds of spinning threads on two cores otherwise starve the ones they
    wait for)."""
    old_cas = "__atomic_compare_exchange_n(a, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; }"
    new_cas = ("unsigned want = cmp; __atomic_compare_exchange_n(a, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); "
               "if (cmp != want) std::this_thread::yield(); return cmp; }")
    assert old_cas in SHIM
    return ("#include <thread>\n" + SHIM.replace("dim3s gridDim, blockDim;", "thread_local dim3s gridDim, blockDim;")
            .replace(old_cas, new_cas))


def with_variant(kernel_source: str, variant_source: str) -> str:
    """Both sources in one translation unit (one build, not two: g++ takes seconds here): the variant's
    kernels, helpers, macros and barrier renamed bad_* (the copy helpers are under an include guard, so the
    variant uses the first copy's)."""
    renamed = re.sub(r"\b(moe_|PKB_MOE_|pkb_block_barrier)", lambda m: "bad_" + m.group(1), variant_source)
    return kernel_source + "\n" + renamed


def build_moe(kernel_source: str, variant_source: str, directory: Path, harness: str | None = None,
              shim: str = "") -> Path:
    """`harness` (MOE_HARNESS by default) around an MoE expert's source and a variant of it (`with_variant`), on
    `_moe_shim` and the expert's own `shim`."""
    source = _moe_shim() + shim + re.sub(r"#include <[^>]+>\n", "", with_variant(kernel_source, variant_source))
    return compile_harness(source + (MOE_HARNESS if harness is None else harness), directory)


def run_moe(binary: Path, world: int, blocks: int, threads: int, pull_blocks: int, dtype: str, calls: int, rows: int,
            cols: int, inputs: bytes, directory: Path, variant: bool = False) -> bytes:
    """Every call's every rank's output (raw bytes, call-major), from every call's every rank's send counts,
    receive counts and rows; `variant`: run the variant's kernels."""
    return execute(binary, [world, blocks, threads, pull_blocks, dtype, calls, rows, cols], inputs, directory,
                   (int(variant),))


# -- the moe_post_all2all expert's two kernels (publish + base table, then the weighted combine) ------------------

MOE_POST_SHIM = r"""
static inline float __bfloat162float(__nv_bfloat16 h) { return bf2f(h); }
static inline float __half2float(__half h) { return (float)h.h; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return f2bf(f); }
static inline __half __float2half_rn(float f) { return __half{(_Float16)f}; }
"""

MOE_POST_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <string>

struct Call { std::vector<long long> recv, counts, selected; std::vector<int> pos; std::vector<unsigned char> weights, outputs, out; };

// One rank's calls on its own host thread: the publish grid's threads concurrent (its barrier is real), then
// the combine grid one thread after another (it has no barrier). Ranks race each other across calls.
template <typename T>
static void rank_main(int r, int W, int G, int Tn, int BX, int calls, long long cap, long long cols, long long tokens,
                      int K, int E, long long slot_bytes, long long* ptrs, unsigned long long* pads,
                      std::vector<Call>* data,
                      void (*publish)(const T*, const long long*, const long long*, long long*, const long long*, const unsigned long long*, int, int, int, long long, long long, long long, long long),
                      void (*combine)(const long long*, const long long*, const int*, const long long*, const T*, T*, int, int, long long, int, long long, long long, long long, long long, int)) {
    std::vector<long long> bases(E, -7);
    int vec = (cols * (long long)sizeof(T)) % 16 == 0;
    for (int c = 0; c < calls; ++c) {
        Call& call = (*data)[c * W + r];
        std::vector<std::thread> threads;
        std::vector<std::barrier<>*> bars;
        for (int b = 0; b < G; ++b) {
            auto* bb = new std::barrier<>(Tn); bars.push_back(bb);
            for (int t = 0; t < Tn; ++t)
                threads.emplace_back([&, b, t, bb]() {
                    threadIdx.x = t; blockIdx.x = b; blockIdx.y = 0; gridDim.x = G; gridDim.y = 1; blockDim.x = Tn;
                    block_bar = bb;
                    publish((const T*)call.outputs.data(), call.recv.data(), call.counts.data(), bases.data(), ptrs, pads,
                            r, W, E, cols, cap, slot_bytes, c % 2);
                });
        }
        for (auto& th : threads) th.join();
        for (auto* bb : bars) delete bb;
        gridDim.x = BX; gridDim.y = 1; blockDim.x = Tn;
        for (int b = 0; b < BX; ++b) for (int t = 0; t < Tn; ++t) {
            threadIdx.x = t; blockIdx.x = b; blockIdx.y = 0;
            combine(ptrs, bases.data(), call.pos.data(), call.selected.data(), (const T*)call.weights.data(),
                    (T*)call.out.data(), W, E, tokens, K, cols, cap, slot_bytes, c % 2, vec);
        }
    }
}

int main(int argc, char** argv) {
    int W = atoi(argv[1]), G = atoi(argv[2]), Tn = atoi(argv[3]), BX = atoi(argv[4]);
    std::string dtype = argv[5];
    int calls = atoi(argv[6]);
    long long cap = atoll(argv[7]), cols = atoll(argv[8]), tokens = atoll(argv[9]);
    int K = atoi(argv[10]), E = atoi(argv[11]);
    const char* in_path = argv[12]; const char* out_path = argv[13];
    const bool bad = atoi(argv[14]) != 0;   // the variant's kernels (bad_moe_*) instead of the expert's
    int elem = dtype == "f32" ? 4 : 2;
    long long slot_bytes = 512 + ((cap * cols * elem + 15) / 16) * 16;
    std::vector<unsigned char*> bufs(W); std::vector<unsigned*> pads(W);
    std::vector<long long> ptrs(W); std::vector<unsigned long long> padptrs(W);
    for (int r = 0; r < W; ++r) {
        bufs[r] = (unsigned char*)aligned_alloc(256, ((2 * slot_bytes + 255) / 256) * 256);
        memset(bufs[r], 0xAB, 2 * slot_bytes);  // garbage
        pads[r] = (unsigned*)calloc(G * W + 64, 4);
        ptrs[r] = (long long)bufs[r]; padptrs[r] = (unsigned long long)pads[r];
    }
    // input, per call, per rank: recv (W int64), counts (E int64), selected (T K int64), pos (E T int32),
    // weights (T K elements), expert outputs (cap x cols elements)
    FILE* fin = fopen(in_path, "rb");
    std::vector<Call> data(calls * W);
    for (auto& call : data) {
        call.recv.resize(W); call.counts.resize(E); call.selected.resize(tokens * K); call.pos.resize(E * tokens);
        call.weights.resize(tokens * K * elem + 16); call.outputs.resize(cap * cols * elem + 16);
        call.out.assign(tokens * cols * elem + 16, 0xCD);
        if (fread(call.recv.data(), 8, W, fin) != (size_t)W) return 2;
        if (fread(call.counts.data(), 8, E, fin) != (size_t)E) return 2;
        if (fread(call.selected.data(), 8, tokens * K, fin) != (size_t)(tokens * K)) return 2;
        if (fread(call.pos.data(), 4, E * tokens, fin) != (size_t)(E * tokens)) return 2;
        if (fread(call.weights.data(), elem, tokens * K, fin) != (size_t)(tokens * K)) return 2;
        if (fread(call.outputs.data(), elem, cap * cols, fin) != (size_t)(cap * cols)) return 2;
    }
    fclose(fin);
    std::vector<std::thread> ranks;
    for (int r = 0; r < W; ++r) {
        if (dtype == "f32")
            ranks.emplace_back(rank_main<float>, r, W, G, Tn, BX, calls, cap, cols, tokens, K, E, slot_bytes, ptrs.data(),
                               padptrs.data(), &data, bad ? bad_moe_post_publish_f32 : moe_post_publish_f32,
                               bad ? bad_moe_combine_f32 : moe_combine_f32);
        else if (dtype == "bf16")
            ranks.emplace_back(rank_main<__nv_bfloat16>, r, W, G, Tn, BX, calls, cap, cols, tokens, K, E, slot_bytes,
                               ptrs.data(), padptrs.data(), &data, bad ? bad_moe_post_publish_bf16 : moe_post_publish_bf16,
                               bad ? bad_moe_combine_bf16 : moe_combine_bf16);
        else
            ranks.emplace_back(rank_main<__half>, r, W, G, Tn, BX, calls, cap, cols, tokens, K, E, slot_bytes,
                               ptrs.data(), padptrs.data(), &data, bad ? bad_moe_post_publish_f16 : moe_post_publish_f16,
                               bad ? bad_moe_combine_f16 : moe_combine_f16);
    }
    for (auto& th : ranks) th.join();
    for (int r = 0; r < W; ++r) for (int i = 0; i < G * W; ++i) if (pads[r][i]) { fprintf(stderr, "pad not zero\n"); return 3; }
    FILE* fout = fopen(out_path, "wb");
    for (auto& call : data) fwrite(call.out.data(), elem, tokens * cols, fout);
    fclose(fout);
    return 0;
}
"""


def build_moe_post(kernel_source: str, variant_source: str, directory: Path) -> Path:
    """MOE_POST_HARNESS around the moe_post_all2all expert's source and a variant of it, as build_moe."""
    return build_moe(kernel_source, variant_source, directory, MOE_POST_HARNESS, MOE_POST_SHIM)


def run_moe_post(binary: Path, world: int, blocks: int, threads: int, combine_blocks: int, dtype: str, calls: int,
                 cap: int, cols: int, tokens: int, k: int, experts: int, inputs: bytes, directory: Path,
                 variant: bool = False) -> bytes:
    """Every call's every rank's combined tokens (raw bytes, call-major); `variant`: the variant's kernels."""
    return execute(binary, [world, blocks, threads, combine_blocks, dtype, calls, cap, cols, tokens, k, experts],
                   inputs, directory, (int(variant),))


# -- the moe_pre_all2all expert's two kernels (publish tokens + permutation + offsets, then the gather) -----------

MOE_PRE_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <string>

struct Call { std::vector<unsigned char> map; std::vector<int> cum; std::vector<long long> counts, recv, perm;
              std::vector<unsigned char> hidden, out; long long out_rows; };

template <typename T>
static void rank_main(int r, int W, int G, int Tn, int BX, int calls, long long tokens, long long cols, long long pairs,
                      int E, long long slot_bytes, long long* ptrs, unsigned long long* pads, std::vector<Call>* data,
                      void (*publish)(const T*, const bool*, const int*, long long*, const long long*, const unsigned long long*, int, int, int, long long, long long, long long, long long, long long),
                      void (*pull)(const long long*, const long long*, T*, int, int, int, long long, long long, long long, long long, long long, long long)) {
    for (int c = 0; c < calls; ++c) {
        Call& call = (*data)[c * W + r];
        std::vector<std::thread> threads;
        std::vector<std::barrier<>*> bars;
        for (int b = 0; b < G; ++b) {
            auto* bb = new std::barrier<>(Tn); bars.push_back(bb);
            for (int t = 0; t < Tn; ++t)
                threads.emplace_back([&, b, t, bb]() {
                    threadIdx.x = t; blockIdx.x = b; blockIdx.y = 0; gridDim.x = G; gridDim.y = 1; blockDim.x = Tn;
                    block_bar = bb;
                    publish((const T*)call.hidden.data(), (const bool*)call.map.data(), call.cum.data(), call.perm.data(),
                            ptrs, pads, r, W, E, tokens, cols, pairs, slot_bytes, c % 2);
                });
        }
        for (auto& th : threads) th.join();
        for (auto* bb : bars) delete bb;
        gridDim.x = BX; gridDim.y = E; blockDim.x = Tn;   // grid.y: every (local expert, source) chunk
        for (int y = 0; y < E; ++y) for (int b = 0; b < BX; ++b) for (int t = 0; t < Tn; ++t) {
            threadIdx.x = t; blockIdx.x = b; blockIdx.y = y;
            pull(ptrs, call.counts.data(), (T*)call.out.data(), r, W, E, tokens, cols, pairs, call.out_rows, slot_bytes,
                 c % 2);
        }
    }
}

int main(int argc, char** argv) {
    int W = atoi(argv[1]), G = atoi(argv[2]), Tn = atoi(argv[3]), BX = atoi(argv[4]);
    std::string dtype = argv[5];
    int calls = atoi(argv[6]);
    long long tokens = atoll(argv[7]), cols = atoll(argv[8]), pairs = atoll(argv[9]);
    int E = atoi(argv[10]);
    const char* in_path = argv[11]; const char* out_path = argv[12];
    const bool bad = atoi(argv[13]) != 0;
    int elem = dtype == "f32" ? 4 : 2;
    long long slot_bytes = 512 + ((pairs + 1) / 2) * 16 + ((tokens * cols * elem + 15) / 16) * 16;
    std::vector<unsigned char*> bufs(W); std::vector<unsigned*> pads(W);
    std::vector<long long> ptrs(W); std::vector<unsigned long long> padptrs(W);
    for (int r = 0; r < W; ++r) {
        bufs[r] = (unsigned char*)aligned_alloc(256, ((2 * slot_bytes + 255) / 256) * 256);
        memset(bufs[r], 0xAB, 2 * slot_bytes);  // garbage
        pads[r] = (unsigned*)calloc(G * W + 64, 4);
        ptrs[r] = (long long)bufs[r]; padptrs[r] = (unsigned long long)pads[r];
    }
    // input, per call, per rank: routing map (E T bytes), its flat cumulative sum (E T int32), counts (W x E/W
    // int64), recv (W int64), tokens (T x cols elements)
    FILE* fin = fopen(in_path, "rb");
    std::vector<Call> data(calls * W);
    for (auto& call : data) {
        call.map.resize(E * tokens + 1); call.cum.resize(E * tokens + 1); call.counts.resize(E); call.recv.resize(W);
        call.hidden.resize(tokens * cols * elem + 16); call.perm.assign(pairs + 1, -5);
        if (fread(call.map.data(), 1, E * tokens, fin) != (size_t)(E * tokens)) return 2;
        if (fread(call.cum.data(), 4, E * tokens, fin) != (size_t)(E * tokens)) return 2;
        if (fread(call.counts.data(), 8, E, fin) != (size_t)E) return 2;
        if (fread(call.recv.data(), 8, W, fin) != (size_t)W) return 2;
        if (fread(call.hidden.data(), elem, tokens * cols, fin) != (size_t)(tokens * cols)) return 2;
        call.out_rows = 0;
        for (int s = 0; s < W; ++s) call.out_rows += call.recv[s];
        call.out.assign(call.out_rows * cols * elem + 16, 0xCD);
    }
    fclose(fin);
    std::vector<std::thread> ranks;
    for (int r = 0; r < W; ++r) {
        if (dtype == "f32")
            ranks.emplace_back(rank_main<float>, r, W, G, Tn, BX, calls, tokens, cols, pairs, E, slot_bytes, ptrs.data(),
                               padptrs.data(), &data, bad ? bad_moe_pre_publish_f32 : moe_pre_publish_f32,
                               bad ? bad_moe_pre_pull_f32 : moe_pre_pull_f32);
        else if (dtype == "bf16")
            ranks.emplace_back(rank_main<__nv_bfloat16>, r, W, G, Tn, BX, calls, tokens, cols, pairs, E, slot_bytes,
                               ptrs.data(), padptrs.data(), &data, bad ? bad_moe_pre_publish_bf16 : moe_pre_publish_bf16,
                               bad ? bad_moe_pre_pull_bf16 : moe_pre_pull_bf16);
        else
            ranks.emplace_back(rank_main<__half>, r, W, G, Tn, BX, calls, tokens, cols, pairs, E, slot_bytes,
                               ptrs.data(), padptrs.data(), &data, bad ? bad_moe_pre_publish_f16 : moe_pre_publish_f16,
                               bad ? bad_moe_pre_pull_f16 : moe_pre_pull_f16);
    }
    for (auto& th : ranks) th.join();
    for (int r = 0; r < W; ++r) for (int i = 0; i < G * W; ++i) if (pads[r][i]) { fprintf(stderr, "pad not zero\n"); return 3; }
    FILE* fout = fopen(out_path, "wb");
    for (auto& call : data) { fwrite(call.out.data(), elem, call.out_rows * cols, fout); fwrite(call.perm.data(), 8, pairs, fout); }
    fclose(fout);
    return 0;
}
"""


def build_moe_pre(kernel_source: str, variant_source: str, directory: Path) -> Path:
    """MOE_PRE_HARNESS around the moe_pre_all2all expert's source and a variant of it, as build_moe."""
    return build_moe(kernel_source, variant_source, directory, MOE_PRE_HARNESS)


def run_moe_pre(binary: Path, world: int, blocks: int, threads: int, pull_blocks: int, dtype: str, calls: int,
                tokens: int, cols: int, pairs: int, experts: int, inputs: bytes, directory: Path,
                variant: bool = False) -> bytes:
    """Every call's every rank's regrouped rows then permutation (raw bytes, call-major)."""
    return execute(binary, [world, blocks, threads, pull_blocks, dtype, calls, tokens, cols, pairs, experts], inputs,
                   directory, (int(variant),))
