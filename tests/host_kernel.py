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
#define __launch_bounds__(a, b)
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
    (directory / "in.bin").write_bytes(inputs)
    subprocess.run([str(binary), str(world), str(blocks), str(threads), str(p), str(p // world), str(calls),
                    str(directory / "in.bin"), str(directory / "out.bin")], check=True, capture_output=True, timeout=300)
    return (directory / "out.bin").read_bytes()


def compiler() -> str | None:
    return shutil.which("g++")


def build(kernel_source: str, directory: Path, harness: str = HARNESS) -> Path:
    """The harness around `kernel_source` (its #include lines dropped: the shim stands for them); `harness`
    the main() that launches it (HARNESS: the quantised all-reduce's; ZERO2_HARNESS: the ZeRO-2 step's)."""
    source = SHIM + re.sub(r"#include <[^>]+>\n", "", kernel_source) + harness
    (directory / "harness.cpp").write_text(source)
    binary = directory / "harness"
    subprocess.run([compiler(), "-std=c++20", "-O0", "-pthread", "-w", "-o", str(binary), str(directory / "harness.cpp")],
                   check=True, capture_output=True, timeout=300)
    return binary


def run(binary: Path, world: int, blocks: int, threads: int, nb: int, dtype: str, calls: int, two_shot: bool,
        inputs: bytes, directory: Path) -> bytes:
    """Every call's every rank's output (raw bytes, call-major), from every call's every rank's input."""
    (directory / "in.bin").write_bytes(inputs)
    subprocess.run([str(binary), str(world), str(blocks), str(threads), str(nb), dtype, str(calls), str(int(two_shot)),
                    str(directory / "in.bin"), str(directory / "out.bin")], check=True, capture_output=True, timeout=300)
    return (directory / "out.bin").read_bytes()


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
