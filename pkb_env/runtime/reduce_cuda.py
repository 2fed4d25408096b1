"""CUDA source for sums over the ranks' symmetric buffers in float32: `reduce_span` and its pieces.

Defines (T is float, __nv_bfloat16 or __half):
  Pack<T>::init/add/pack     float32 accumulation of one 16-byte pack (4 floats, or 8 bfloat16 / half):
                             a[] = pack, a[] += pack, and the pack of a[] rounded once to T;
  to_f32(v), from_f32<T>(v)  one element to float32 and back (round to nearest even);
  reduce_span<T, W>(dst, dst2, ptrs, ws, off, n, tid, nthreads)
                             dst[i] (and dst2[i] unless dst2 is nullptr) = the sum over ranks r of
                             buffer_r[off + i], for i in [0, n), `ptrs` the buffers' addresses
                             (`buf.ptrs`); summed in float32 in rank order, so every rank computes the same
                             bits; 16-byte packs where buffer 0 and dst share their alignment, single elements
                             at the ends; this thread is worker `tid` of `nthreads`. W > 0 is the world size
                             fixed at compile time (the loads of all ranks issued before the adds); W == 0
                             takes any world size `ws` at run time;
  PKB_FOR_WORLD_SIZE(ws, CALL)
                             a switch that runs CALL with `constexpr int W` = ws for ws 1..8, else W = 0:
                             `PKB_FOR_WORLD_SIZE(ws, (reduce_span<T, W>(out, nullptr, ptrs, ws, 0, n, tid, nt)))`.
It contains COPY_CUDA (`vector_head`, `copy_span`, which it builds on) and includes <cuda_bf16.h> and
<cuda_fp16.h>.

Include it in a kernel's source: `compile_cuda(REDUCE_CUDA + MY_KERNELS)`. Include guards (PKB_COPY_CUDA,
PKB_REDUCE_CUDA) make every definition happen once, also when COPY_CUDA or REDUCE_CUDA is concatenated
again. It defines the names above in the global namespace: a kernel source must not define its own.
"""
from pkb_env.runtime.copy_cuda import COPY_CUDA

_REDUCE = r"""
#ifndef PKB_REDUCE_CUDA
#define PKB_REDUCE_CUDA
// ---- float32 accumulation of 16-byte packs (4 floats, or 8 bfloat16 / half) ----------------------
template <typename T> struct Pack;

template <> struct Pack<float> {
    static __device__ __forceinline__ void init(float* a, const uint4& v) {
        a[0] = __uint_as_float(v.x); a[1] = __uint_as_float(v.y);
        a[2] = __uint_as_float(v.z); a[3] = __uint_as_float(v.w);
    }
    static __device__ __forceinline__ void add(float* a, const uint4& v) {
        a[0] += __uint_as_float(v.x); a[1] += __uint_as_float(v.y);
        a[2] += __uint_as_float(v.z); a[3] += __uint_as_float(v.w);
    }
    static __device__ __forceinline__ uint4 pack(const float* a) {
        return make_uint4(__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3]));
    }
};

template <> struct Pack<__nv_bfloat16> {
    static __device__ __forceinline__ void init(float* a, const uint4& v) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) { const float2 f = __bfloat1622float2(h[i]); a[2 * i] = f.x; a[2 * i + 1] = f.y; }
    }
    static __device__ __forceinline__ void add(float* a, const uint4& v) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) { const float2 f = __bfloat1622float2(h[i]); a[2 * i] += f.x; a[2 * i + 1] += f.y; }
    }
    static __device__ __forceinline__ uint4 pack(const float* a) {
        uint4 v;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(a[2 * i], a[2 * i + 1]);
        return v;
    }
};

template <> struct Pack<__half> {
    static __device__ __forceinline__ void init(float* a, const uint4& v) {
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) { const float2 f = __half22float2(h[i]); a[2 * i] = f.x; a[2 * i + 1] = f.y; }
    }
    static __device__ __forceinline__ void add(float* a, const uint4& v) {
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) { const float2 f = __half22float2(h[i]); a[2 * i] += f.x; a[2 * i + 1] += f.y; }
    }
    static __device__ __forceinline__ uint4 pack(const float* a) {
        uint4 v;
        __half2* h = reinterpret_cast<__half2*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(a[2 * i], a[2 * i + 1]);
        return v;
    }
};

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// dst[i] (and dst2[i] unless null) = sum over ranks r of buffer_r[off + i], for i in [0, n).
// Summed in float32 in rank order. This thread is worker `tid` of `nthreads`. W > 0: the world size,
// fixed at compile time (loads of all ranks issued before the adds); W == 0: any world size.
template <typename T, int W>
__device__ __forceinline__ void reduce_span(T* dst, T* dst2, const long long* ptrs, int ws, long long off,
                                            long long n, long long tid, long long nthreads) {
    constexpr int V = 16 / sizeof(T);
    const T* base0 = reinterpret_cast<const T*>(ptrs[0]) + off;
    const long long head = vector_head<T>(base0, dst, n);
    const long long nvec = (n - head) / V;
    const long long tail = head + nvec * V;
    const T* src[W > 0 ? W : 1];  // the ranks' buffers, read once (a store to dst might alias ptrs[])
#pragma unroll
    for (int r = 0; r < (W > 0 ? W : 1); ++r) src[r] = reinterpret_cast<const T*>(ptrs[r]);
    for (long long i = tid; i < nvec; i += nthreads) {
        const long long e = off + head + i * V;
        float acc[V];
        if constexpr (W > 0) {
            uint4 v[W];
#pragma unroll
            for (int r = 0; r < W; ++r) v[r] = *reinterpret_cast<const uint4*>(src[r] + e);
            Pack<T>::init(acc, v[0]);
#pragma unroll
            for (int r = 1; r < W; ++r) Pack<T>::add(acc, v[r]);
        } else {
            Pack<T>::init(acc, *reinterpret_cast<const uint4*>(src[0] + e));
            for (int r = 1; r < ws; ++r) Pack<T>::add(acc, *reinterpret_cast<const uint4*>(reinterpret_cast<const T*>(ptrs[r]) + e));
        }
        const uint4 packed = Pack<T>::pack(acc);
        *reinterpret_cast<uint4*>(dst + head + i * V) = packed;
        if (dst2 != nullptr) *reinterpret_cast<uint4*>(dst2 + head + i * V) = packed;
    }
    // the unaligned head and the tail that does not fill a 16-byte pack, one element per thread
    const long long scalars = head + (n - tail);
    for (long long k = tid; k < scalars; k += nthreads) {
        const long long i = k < head ? k : tail + (k - head);
        float acc = to_f32(src[0][off + i]);
        if constexpr (W > 0) {
#pragma unroll
            for (int r = 1; r < W; ++r) acc += to_f32(src[r][off + i]);
        } else {
            for (int r = 1; r < ws; ++r) acc += to_f32(reinterpret_cast<const T*>(ptrs[r])[off + i]);
        }
        const T value = from_f32<T>(acc);
        dst[i] = value;
        if (dst2 != nullptr) dst2[i] = value;
    }
}

// Runs CALL with `constexpr int W` = ws for world sizes 1..8 (reduce_span's unrolled paths), else W = 0.
#define PKB_FOR_WORLD_SIZE(ws, CALL)                                  \
    switch (ws) {                                                      \
        case 1: { constexpr int W = 1; CALL; } break;                  \
        case 2: { constexpr int W = 2; CALL; } break;                  \
        case 3: { constexpr int W = 3; CALL; } break;                  \
        case 4: { constexpr int W = 4; CALL; } break;                  \
        case 5: { constexpr int W = 5; CALL; } break;                  \
        case 6: { constexpr int W = 6; CALL; } break;                  \
        case 7: { constexpr int W = 7; CALL; } break;                  \
        case 8: { constexpr int W = 8; CALL; } break;                  \
        default: { constexpr int W = 0; CALL; } break;                 \
    }
#endif  // PKB_REDUCE_CUDA
"""

REDUCE_CUDA = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
""" + COPY_CUDA + _REDUCE
