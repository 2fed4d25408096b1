"""Vocab-parallel cross entropy in one kernel: one pass over the logits, one exchange of three floats a row.

One launch per call. Each warp owns rows (the same rows on every rank: same grid, same mapping):
  phase 1  an online log-sum-exp over the row's local logits (16-byte loads where rows are aligned): the
           running maximum m and the sum s of exp(x - m), merged across the warp's lanes; and the target's
           logit t if this rank holds the target's id (else 0). (m, s, t) go to this rank's symmetric buffer;
  barrier  `pkb_block_barrier`: block b waits until block b of every rank has written its rows;
  phase 2  each row's (m, s, t) of every rank: M = max m, S = sum s * exp(m - M), T = sum t, and
           loss = log(S) + M - T in float64, rounded once to float32. Every rank computes the same bits.
The three reductions of the reference (maximum, target logit, sum of exponentials) become one exchange,
and the logits are read once (the reference upcasts them to a float32 copy and passes over it ~5 times).

The buffer has two slots (call i uses slot i % 2), so no barrier is needed after phase 2: a rank writes a
slot again only two calls later, after passing a barrier that every peer reaches only from its next kernel,
i.e. after its phase 2 of this call. Every block of the grid must be resident at once (the grid is at most
one block per SM).
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import SIGNAL_PAD_CUDA, compile_cuda, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
"""

_KERNELS = r"""
// -infinity, spelled without <cmath> (NVRTC has no host headers)
#define PKB_NEG_INF_F __int_as_float((int)0xff800000u)
#define PKB_NEG_INF_D __longlong_as_double((long long)0xfff0000000000000ull)

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

// (m, s) <- the log-sum-exp state of (m, s) and (m2, s2): the larger maximum, each sum rescaled to it.
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    const float top = fmaxf(m, m2);
    if (top == PKB_NEG_INF_F) return;  // both empty: keep (-inf, 0) rather than exp(-inf - -inf) = NaN
    s = s * expf(m - top) + s2 * expf(m2 - top);
    m = top;
}

// logits: (rows, n) row-major, this rank's vocabulary block [rank * n, (rank + 1) * n); target: (rows,)
// ids over the whole vocabulary; loss: (rows,) float32. stats: every rank's buffer, 2 slots of 3 x rows
// floats (maximum, sum of exponentials, target logit); this call uses slot `slot`.
template <typename T>
__device__ __forceinline__ void vocab_ce(const T* __restrict__ logits, const long long* __restrict__ target,
                                         float* __restrict__ loss, const long long* stats,
                                         const unsigned long long* pads, int rank, int ws, long long rows,
                                         long long n, long long slot, int vec) {
    constexpr int V = 16 / sizeof(T);
    const int lane = threadIdx.x & 31;
    const long long warps = blockDim.x >> 5;
    const long long first = (long long)blockIdx.x * warps + (threadIdx.x >> 5);
    const long long stride = (long long)gridDim.x * warps;
    const long long nv = n / V;
    float* mine = reinterpret_cast<float*>(stats[rank]) + slot * 3 * rows;

    // phase 1: this rank's (maximum, sum of exponentials, target logit) of each of the warp's rows
    for (long long row = first; row < rows; row += stride) {
        const T* xr = logits + row * n;
        float m = PKB_NEG_INF_F, s = 0.f;
        if (vec) {
            const uint4* xv = reinterpret_cast<const uint4*>(xr);
#pragma unroll 4
            for (long long i = lane; i < nv; i += 32) {
                const uint4 u = xv[i];
                const T* e = reinterpret_cast<const T*>(&u);
                float v[V];
                float top = PKB_NEG_INF_F;
#pragma unroll
                for (int j = 0; j < V; ++j) { v[j] = to_f32(e[j]); top = fmaxf(top, v[j]); }
                if (top > m) { s *= expf(m - top); m = top; }
#pragma unroll
                for (int j = 0; j < V; ++j) s += expf(v[j] - m);
            }
        } else {
            for (long long i = lane; i < n; i += 32) {
                const float v = to_f32(xr[i]);
                if (v > m) { s = s * expf(m - v) + 1.f; m = v; } else { s += expf(v - m); }
            }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
            lse_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            const long long local = target[row] - (long long)rank * n;
            mine[row] = m;
            mine[rows + row] = s;
            mine[2 * rows + row] = (local >= 0 && local < n) ? to_f32(xr[local]) : 0.f;
        }
    }

    pkb_block_barrier(pads, rank, ws);  // block b's rows have their statistics on every rank

    // phase 2: combine the ranks' statistics of each row (lane p reads rank p)
    for (long long row = first; row < rows; row += stride) {
        double m = PKB_NEG_INF_D, s = 0.0, t = 0.0;
        for (int p = lane; p < ws; p += 32) {
            const volatile float* theirs = reinterpret_cast<const volatile float*>(stats[p]) + slot * 3 * rows;
            const double mp = theirs[row], sp = theirs[rows + row], tp = theirs[2 * rows + row];
            const double top = fmax(m, mp);
            s = (top == PKB_NEG_INF_D) ? 0.0 : s * exp(m - top) + sp * exp(mp - top);
            m = top;
            t += tp;
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            const double m2 = __shfl_xor_sync(0xffffffffu, m, offset);
            const double s2 = __shfl_xor_sync(0xffffffffu, s, offset);
            const double t2 = __shfl_xor_sync(0xffffffffu, t, offset);
            const double top = fmax(m, m2);
            s = (top == PKB_NEG_INF_D) ? 0.0 : s * exp(m - top) + s2 * exp(m2 - top);
            m = top;
            t += t2;
        }
        if (lane == 0) loss[row] = (float)(log(s) + m - t);
    }
}

#define PKB_VOCAB_CE(NAME, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(512, 1) NAME(                                               \
        const T* logits, const long long* target, float* loss, const long long* stats,                       \
        const unsigned long long* pads, int rank, int ws, long long rows, long long n, long long slot,         \
        int vec) {                                                                                             \
        vocab_ce<T>(logits, target, loss, stats, pads, rank, ws, rows, n, slot, vec);                         \
    }
PKB_VOCAB_CE(vocab_ce_f32, float)
PKB_VOCAB_CE(vocab_ce_bf16, __nv_bfloat16)
PKB_VOCAB_CE(vocab_ce_f16, __half)
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


def solution(vocab_parallel_logits, target, group):
    logits = vocab_parallel_logits.contiguous()
    if logits.dtype not in _SUFFIX:
        raise TypeError(f"vocab_parallel_cross_entropy expert takes float32, bfloat16 or float16 logits, "
                        f"got {logits.dtype}")
    group = group if group is not None else dist.group.WORLD
    ids = target.contiguous().to(torch.int64)
    n = logits.shape[-1]
    rows = ids.numel()
    loss = torch.empty(target.shape, dtype=torch.float32, device=logits.device)
    if rows == 0:
        return loss
    buf = symmetric_buffer((2 * 3 * rows,), torch.float32, tag="expert_vocab_ce", group=group)
    key = ("calls", rows, id(group))
    calls = _state.get(key, 0)
    _state[key] = calls + 1
    pack = 16 // logits.element_size()
    vec = int(n % pack == 0 and logits.data_ptr() % 16 == 0)
    blocks = grid_blocks(rows, _sm_count(logits.device), buf.world_size)
    _module().function("vocab_ce_" + _SUFFIX[logits.dtype])(
        (blocks,), (THREADS,), logits, ids, loss, buf.ptrs, buf.signal_pad_ptrs, i32(buf.rank),
        i32(buf.world_size), i64(rows), i64(n), i64(calls % 2), i32(vec))
    return loss
