"""Tensor-parallel RMSNorm in one kernel: row sums of squares exchanged through peer memory mid-kernel.

One launch per call. Each warp owns rows (the same rows on every rank: same grid, same mapping):
  phase 1  sum of squares of its rows' local columns (16-byte loads where rows are aligned), written to
           this rank's symmetric buffer, one float64 per row;
  barrier  `pkb_block_barrier`: block b waits until block b of every rank has written its rows' sums;
  phase 2  each row's total over the ranks (read from every peer's buffer), inv = 1/sqrt(total/N + eps),
           out = x * inv * weight, rounded once to the dtype; rows in reverse order, so the rows read last
           in phase 1 (still in L2) are read again first.
Arithmetic: float32 for 16-bit inputs (float64 for float32 inputs), the row total and its square root in
float64; one rounding of the output (the reference rounds twice).

Why it beats the reference: the reference launches ~8 kernels (upcast, square, sum, NCCL all_reduce,
divide, rsqrt, scale, downcast, weight) and passes over the (M, N/W) block ~6 times in float32; here one
launch reads it twice (once from L2 where it fits) and writes it once, and the exchange costs one NVLink
round trip inside the kernel instead of an NCCL call.

The buffer has two slots (call i uses slot i % 2), so no barrier is needed after phase 2: a rank writes a
slot again only two calls later, after passing a barrier that every peer reaches only from its next kernel,
i.e. after its phase 2 of this call. Every block of the grid must be resident at once (the grid is at most
one block per SM).
"""
import torch

from pkb_env.runtime import SIGNAL_PAD_CUDA, compile_cuda, f64, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
"""

_KERNELS = r"""
// Element conversions; `acc` is the arithmetic type: float for 16-bit inputs, double for float inputs.
template <typename T> struct Num;
template <> struct Num<float> {
    typedef double acc;
    static __device__ __forceinline__ double in(float v) { return (double)v; }
    static __device__ __forceinline__ float out(double v) { return (float)v; }
};
template <> struct Num<__nv_bfloat16> {
    typedef float acc;
    static __device__ __forceinline__ float in(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 out(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Num<__half> {
    typedef float acc;
    static __device__ __forceinline__ float in(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half out(float v) { return __float2half_rn(v); }
};

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One 16-byte pack of V = 16 / sizeof(T) elements, converted to or from the arithmetic type.
template <typename T>
__device__ __forceinline__ void unpack(const uint4& u, typename Num<T>::acc* v) {
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int j = 0; j < (int)(16 / sizeof(T)); ++j) v[j] = Num<T>::in(e[j]);
}
template <typename T>
__device__ __forceinline__ uint4 pack(const typename Num<T>::acc* v) {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int j = 0; j < (int)(16 / sizeof(T)); ++j) e[j] = Num<T>::out(v[j]);
    return u;
}

// x, out: (rows, n) row-major, this rank's columns; w: (n,). sums: every rank's buffer, 2 slots of `rows`
// doubles; this call uses slot `slot`. vec: rows are 16-byte aligned and n is a multiple of the pack.
template <typename T>
__device__ __forceinline__ void rms_norm(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out,
                                         const long long* sums, const unsigned long long* pads, int rank, int ws,
                                         long long rows, long long n, long long slot, double eps, int vec) {
    typedef typename Num<T>::acc A;
    constexpr int V = 16 / sizeof(T);
    const int lane = threadIdx.x & 31;
    const long long warps = blockDim.x >> 5;
    const long long first = (long long)blockIdx.x * warps + (threadIdx.x >> 5);
    const long long stride = (long long)gridDim.x * warps;
    const long long nv = n / V;
    double* mine = reinterpret_cast<double*>(sums[rank]) + slot * rows;

    // phase 1: this rank's sum of squares of each of the warp's rows
    for (long long row = first; row < rows; row += stride) {
        const T* xr = x + row * n;
        A acc = 0;
        if (vec) {
            const uint4* xv = reinterpret_cast<const uint4*>(xr);
#pragma unroll 4
            for (long long i = lane; i < nv; i += 32) {
                A v[V];
                unpack<T>(xv[i], v);
#pragma unroll
                for (int j = 0; j < V; ++j) acc += v[j] * v[j];
            }
        } else {
            for (long long i = lane; i < n; i += 32) {
                const A v = Num<T>::in(xr[i]);
                acc += v * v;
            }
        }
        acc = warp_sum<A>(acc);
        if (lane == 0) mine[row] = (double)acc;
    }

    pkb_block_barrier(pads, rank, ws);  // block b's rows have their sums on every rank

    // phase 2: normalise, last rows first (the likeliest still in L2)
    if (first >= rows) return;
    const double count = (double)n * (double)ws;
    for (long long row = first + ((rows - 1 - first) / stride) * stride; row >= first; row -= stride) {
        double part = 0.0;
        for (int p = lane; p < ws; p += 32) {
            const volatile double* theirs = reinterpret_cast<const volatile double*>(sums[p]) + slot * rows;
            part += theirs[row];
        }
        const double total = warp_sum<double>(part);
        const A inv = (A)(1.0 / sqrt(total / count + eps));
        const T* xr = x + row * n;
        T* orow = out + row * n;
        if (vec) {
            const uint4* xv = reinterpret_cast<const uint4*>(xr);
            const uint4* wv = reinterpret_cast<const uint4*>(w);
            uint4* ov = reinterpret_cast<uint4*>(orow);
#pragma unroll 4
            for (long long i = lane; i < nv; i += 32) {
                A a[V], b[V];
                unpack<T>(xv[i], a);
                unpack<T>(wv[i], b);
#pragma unroll
                for (int j = 0; j < V; ++j) a[j] = a[j] * inv * b[j];
                ov[i] = pack<T>(a);
            }
        } else {
            for (long long i = lane; i < n; i += 32) orow[i] = Num<T>::out(Num<T>::in(xr[i]) * inv * Num<T>::in(w[i]));
        }
    }
}

#define PKB_RMS_NORM(NAME, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(512, 1) NAME(                                               \
        const T* x, const T* w, T* out, const long long* sums, const unsigned long long* pads, int rank,      \
        int ws, long long rows, long long n, long long slot, double eps, int vec) {                           \
        rms_norm<T>(x, w, out, sums, pads, rank, ws, rows, n, slot, eps, vec);                                 \
    }
PKB_RMS_NORM(rms_norm_f32, float)
PKB_RMS_NORM(rms_norm_bf16, __nv_bfloat16)
PKB_RMS_NORM(rms_norm_f16, __half)
"""

SRC = _HEADER + SIGNAL_PAD_CUDA + _KERNELS

THREADS = 512
MAX_PAD_FLAGS = 2304  # the default signal pad: at most 2304 // world_size blocks may use it
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_state = {}


def grid_blocks(rows, sms, world):
    """Blocks of THREADS threads (one row per warp at a time): enough for every row, at most one per SM (all
    resident at once, as the in-kernel barrier needs) and within the signal pad."""
    return max(1, min(-(-rows // (THREADS // 32)), sms, MAX_PAD_FLAGS // world))


def _module():
    if "module" not in _state:
        _state["module"] = compile_cuda(SRC)
    return _state["module"]


def _sm_count(device):
    key = ("sms", device.index)
    if key not in _state:
        _state[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _state[key]


def solution(hidden_states, weight, eps):
    if hidden_states.dtype not in _SUFFIX or weight.dtype != hidden_states.dtype:
        raise TypeError(f"tp_rms_norm expert takes float32, bfloat16 or float16 activations and a weight of the "
                        f"same dtype, got {hidden_states.dtype} and {weight.dtype}")
    x, w = hidden_states.contiguous(), weight.contiguous()
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    out = torch.empty_like(x)
    if rows == 0 or n == 0:
        return out
    buf = symmetric_buffer((2 * rows,), torch.float64, tag="expert_tp_rms_norm")
    calls = _state.get(("calls", rows), 0)
    _state[("calls", rows)] = calls + 1
    pack = 16 // x.element_size()
    vec = int(n % pack == 0 and all(t.data_ptr() % 16 == 0 for t in (x, w, out)))
    blocks = grid_blocks(rows, _sm_count(x.device), buf.world_size)
    _module().function("rms_norm_" + _SUFFIX[x.dtype])(
        (blocks,), (THREADS,), x, w, out, buf.ptrs, buf.signal_pad_ptrs, i32(buf.rank), i32(buf.world_size),
        i64(rows), i64(n), i64(calls % 2), f64(eps), i32(vec))
    return out
