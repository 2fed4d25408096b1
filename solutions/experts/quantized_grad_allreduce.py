"""Blockwise int8 gradient averaging in one kernel: the codes and scales cross NVLink, not fp32 values.

One launch per call. Each warp owns 128-value blocks (block j: warp j mod (grid * 16), the same warp on
every rank: same grid, same mapping):
  phase 0  quantise: the block's abs-max (a warp reduction), s = max(amax, 1e-8) / 127 and the codes
           q = rint(x / s) clamped to +-127, both with IEEE fp32 division (`__fdiv_rn`) and round half to
           even, exactly as the task defines them; the int8 codes and the fp32 scale go to this rank's
           symmetric buffer (1 + 4/128 bytes a value, where the reference all-reduces 4);
  barrier  `pkb_block_barrier`: block b waits until block b of every rank has quantised its blocks;
  one-shot (W <= 2, or small): every rank reads every rank's codes and scales of its blocks, sums
           q_r * s_r over the ranks in rank order in fp32 (fused multiply-adds), divides by W and rounds
           once to the dtype: every rank computes the same bits;
  two-shot (W > 2 and large, where it moves fewer bytes): rank r does that for slice r of the blocks only
           and writes the mean, in the dtype, to its buffer and its output; a second `pkb_block_barrier`;
           then rank r copies every peer's slice of the mean into its output. Per rank (W-1)/W of the codes
           and (W-1)/W of the mean cross NVLink instead of (W-1) times the codes.
The reference runs ~8 element-wise kernels (abs, amax, divide, round, clamp, cast, multiply) and an NCCL
all-reduce of fp32 values; here the gradient is read once and the mean written once.

The buffer has two slots (call i uses slot i % 2), so no barrier is needed after the last read: a rank
writes a slot again only two calls later, after passing a barrier that every peer reaches only from its
next kernel, i.e. after its reads of this call. Every block of the grid must be resident at once (the grid
is at most one block per SM).
"""
import torch

from pkb_env.runtime import SIGNAL_PAD_CUDA, compile_cuda, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
"""

_KERNELS = r"""
#define QBLOCK 128   // values per scale; a warp handles a block, 4 values a lane

// Four consecutive elements of T as floats (from a 16-byte or 8-byte aligned address), and back.
template <typename T> struct Four;
template <> struct Four<float> {
    typedef uint4 raw;
    static __device__ __forceinline__ void unpack(const raw& u, float* v) {
        v[0] = __uint_as_float(u.x); v[1] = __uint_as_float(u.y); v[2] = __uint_as_float(u.z); v[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ raw pack(const float* v) {
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    }
};
template <> struct Four<__nv_bfloat16> {
    typedef uint2 raw;
    static __device__ __forceinline__ void unpack(const raw& u, float* v) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
        const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
    }
    static __device__ __forceinline__ raw pack(const float* v) {
        raw u;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
        h[0] = __floats2bfloat162_rn(v[0], v[1]); h[1] = __floats2bfloat162_rn(v[2], v[3]);
        return u;
    }
};
template <> struct Four<__half> {
    typedef uint2 raw;
    static __device__ __forceinline__ void unpack(const raw& u, float* v) {
        const __half2* h = reinterpret_cast<const __half2*>(&u);
        const float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
    }
    static __device__ __forceinline__ raw pack(const float* v) {
        raw u;
        __half2* h = reinterpret_cast<__half2*>(&u);
        h[0] = __floats2half2_rn(v[0], v[1]); h[1] = __floats2half2_rn(v[2], v[3]);
        return u;
    }
};

// One rank's slot: codes (n int8) | scales (nb float, padded to 16 bytes) | mean (n T, two-shot only).
struct Slot {
    signed char* codes;
    float* scales;
    unsigned char* mean;
};
__device__ __forceinline__ Slot slot_of(long long base, long long slot_bytes, long long slot, long long n, long long nb) {
    unsigned char* p = reinterpret_cast<unsigned char*>(base) + slot * slot_bytes;
    Slot s;
    s.codes = reinterpret_cast<signed char*>(p);
    s.scales = reinterpret_cast<float*>(p + n);
    s.mean = p + n + ((nb * 4 + 15) / 16) * 16;
    return s;
}

// The first index >= lo with index = warp (mod warps).
__device__ __forceinline__ long long first_owned(long long lo, long long warp, long long warps) {
    long long k = (warp - lo) % warps;
    if (k < 0) k += warps;
    return lo + k;
}

// acc[k] += q * scale for the 4 codes packed in `word` (fused multiply-adds: the exact product, one rounding).
__device__ __forceinline__ void add_codes(float* acc, int word, float scale) {
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[k] = __fmaf_rn((float)(signed char)((word >> (8 * k)) & 0xff), scale, acc[k]);
}

// The mean over the ranks of q_r * s_r for block j, this lane's 4 values, in fp32, rank order. W > 0: the
// world size at compile time (every rank's loads issued before the adds); W == 0: any world size `ws`.
template <int W>
__device__ __forceinline__ void mean_of_block(const long long* ptrs, int ws, long long slot_bytes, long long slot,
                                              long long n, long long nb, long long j, int lane, float* acc) {
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    if constexpr (W > 0) {
        int words[W];
        float scales[W];
#pragma unroll
        for (int r = 0; r < W; ++r) {
            const Slot s = slot_of(ptrs[r], slot_bytes, slot, n, nb);
            words[r] = __ldcg(reinterpret_cast<const int*>(s.codes + j * QBLOCK) + lane);
            scales[r] = __ldcg(s.scales + j);
        }
#pragma unroll
        for (int r = 0; r < W; ++r) add_codes(acc, words[r], scales[r]);
    } else {
        for (int r = 0; r < ws; ++r) {
            const Slot s = slot_of(ptrs[r], slot_bytes, slot, n, nb);
            add_codes(acc, __ldcg(reinterpret_cast<const int*>(s.codes + j * QBLOCK) + lane), __ldcg(s.scales + j));
        }
    }
    const float count = (float)(W > 0 ? W : ws);
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[k] = __fdiv_rn(acc[k], count);
}

// x, out: (n,) 16-byte aligned, n = nb * 128. ptrs: every rank's buffer (2 slots of slot_bytes).
template <typename T, int W>
__device__ __forceinline__ void qar(const T* __restrict__ x, T* __restrict__ out, const long long* ptrs,
                                   const unsigned long long* pads, int rank, int ws, long long nb,
                                   long long slot_bytes, long long slot, int two_shot) {
    typedef typename Four<T>::raw Raw;
    const long long n = nb * QBLOCK;
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const long long warp = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const Slot mine = slot_of(ptrs[rank], slot_bytes, slot, n, nb);

    // phase 0: quantise this rank's blocks, exactly as defined (IEEE fp32 division, round half to even)
    for (long long j = warp; j < nb; j += warps) {
        float v[4];
        Four<T>::unpack(reinterpret_cast<const Raw*>(x + j * QBLOCK)[lane], v);
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
        const float scale = __fdiv_rn(fmaxf(amax, 1e-8f), 127.0f);
        int word = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float q = fminf(fmaxf(rintf(__fdiv_rn(v[k], scale)), -127.0f), 127.0f);
            word |= ((int)q & 0xff) << (8 * k);
        }
        reinterpret_cast<int*>(mine.codes + j * QBLOCK)[lane] = word;
        if (lane == 0) mine.scales[j] = scale;
    }

    pkb_block_barrier(pads, rank, ws);  // block b's blocks are quantised on every rank

    if (!two_shot) {   // one-shot: every block, from every rank
        for (long long j = warp; j < nb; j += warps) {
            float acc[4];
            mean_of_block<W>(ptrs, ws, slot_bytes, slot, n, nb, j, lane, acc);
            reinterpret_cast<Raw*>(out + j * QBLOCK)[lane] = Four<T>::pack(acc);
        }
        return;
    }

    // two-shot, phase 1: this rank's slice of the blocks, the mean to its buffer and its output
    const long long per = (nb + ws - 1) / ws;
    {
        const long long lo = (long long)rank * per, hi = lo + per < nb ? lo + per : nb;
        Raw* shared = reinterpret_cast<Raw*>(mine.mean);
        for (long long j = first_owned(lo, warp, warps); j < hi; j += warps) {
            float acc[4];
            mean_of_block<W>(ptrs, ws, slot_bytes, slot, n, nb, j, lane, acc);
            const Raw packed = Four<T>::pack(acc);
            shared[j * (QBLOCK / 4) + lane] = packed;
            reinterpret_cast<Raw*>(out + j * QBLOCK)[lane] = packed;
        }
    }
    pkb_block_barrier(pads, rank, ws);  // block b's share of every slice is averaged on every rank
    // phase 2: every peer's slice of the mean (written by the same block of that peer, during this kernel)
    for (int k = 1; k < ws; ++k) {
        const int p = (rank + k) % ws;
        const long long lo = (long long)p * per, hi = lo + per < nb ? lo + per : nb;
        const Raw* theirs = reinterpret_cast<const Raw*>(slot_of(ptrs[p], slot_bytes, slot, n, nb).mean);
        for (long long j = first_owned(lo, warp, warps); j < hi; j += warps)
            reinterpret_cast<Raw*>(out + j * QBLOCK)[lane] = __ldcg(theirs + j * (QBLOCK / 4) + lane);
    }
}

template <typename T>
__device__ __forceinline__ void qar_any(const T* x, T* out, const long long* ptrs, const unsigned long long* pads,
                                        int rank, int ws, long long nb, long long slot_bytes, long long slot,
                                        int two_shot) {
    switch (ws) {
        case 1: qar<T, 1>(x, out, ptrs, pads, rank, ws, nb, slot_bytes, slot, two_shot); break;
        case 2: qar<T, 2>(x, out, ptrs, pads, rank, ws, nb, slot_bytes, slot, two_shot); break;
        case 4: qar<T, 4>(x, out, ptrs, pads, rank, ws, nb, slot_bytes, slot, two_shot); break;
        case 8: qar<T, 8>(x, out, ptrs, pads, rank, ws, nb, slot_bytes, slot, two_shot); break;
        default: qar<T, 0>(x, out, ptrs, pads, rank, ws, nb, slot_bytes, slot, two_shot); break;
    }
}

#define PKB_QUANT_ALLREDUCE(NAME, T)                                                                           \
    extern "C" __global__ void __launch_bounds__(512, 1) NAME(                                               \
        const T* x, T* out, const long long* bufs, const unsigned long long* pads, int rank, int ws,          \
        long long nb, long long slot_bytes, long long slot, int two_shot) {                                   \
        qar_any<T>(x, out, bufs, pads, rank, ws, nb, slot_bytes, slot, two_shot);                              \
    }
PKB_QUANT_ALLREDUCE(quant_allreduce_f32, float)
PKB_QUANT_ALLREDUCE(quant_allreduce_bf16, __nv_bfloat16)
PKB_QUANT_ALLREDUCE(quant_allreduce_f16, __half)
"""

SRC = _HEADER + SIGNAL_PAD_CUDA + _KERNELS

BLOCK = 128           # values per scale: the task's block_size (the kernel's QBLOCK)
THREADS = 512
MAX_PAD_FLAGS = 2304  # the default signal pad: at most 2304 // world_size blocks may use it
TWO_SHOT_MIN_BYTES = 256 * 1024  # below this the second barrier costs more than the bytes it saves
TWO_SHOT = None       # None: chosen by size (two_shot()); True / False force a path (tests)
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_state = {}


def slot_bytes(n, elem):
    """One slot of a rank's buffer: the int8 codes, the fp32 scales (padded to 16 bytes) and the mean in
    the dtype (used by the two-shot path)."""
    return n + -(-4 * (n // BLOCK) // 16) * 16 + n * elem


def two_shot(n, elem, world):
    """The two-shot path where it moves clearly fewer bytes per rank than the one-shot's (W - 1) copies of
    the codes and scales: (W - 1) / W of them plus (W - 1) / W of the mean in the dtype."""
    if TWO_SHOT is not None:
        return bool(TWO_SHOT) and world > 1
    packed = n + 4 * (n // BLOCK)
    one = (world - 1) * packed
    two = (world - 1) / world * (packed + n * elem)
    return world > 2 and n * elem >= TWO_SHOT_MIN_BYTES and two < 0.8 * one


def grid_blocks(nb, sms, world):
    """Blocks of THREADS threads (one 128-value block per warp at a time): enough for every block, at most
    one per SM (all resident at once, as the in-kernel barrier needs) and within the signal pad."""
    return max(1, min(-(-nb // (THREADS // 32)), sms, MAX_PAD_FLAGS // world))


def _module():
    if "module" not in _state:
        _state["module"] = compile_cuda(SRC)
    return _state["module"]


def _sm_count(device):
    key = ("sms", device.index)
    if key not in _state:
        _state[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _state[key]


def solution(flat_grad, block_size):
    if flat_grad.dtype not in _SUFFIX:
        raise TypeError(f"quantized_grad_allreduce expert takes float32, bfloat16 or float16, not {flat_grad.dtype}")
    if block_size != BLOCK or flat_grad.numel() % BLOCK:
        raise ValueError(f"quantized_grad_allreduce expert: blocks of {BLOCK} values only (block_size "
                         f"{block_size}, {flat_grad.numel()} values)")
    x = flat_grad.contiguous()
    if x.data_ptr() % 16:
        x = x.clone()   # the kernel reads 16-byte (fp32) or 8-byte packs from block boundaries
    out = torch.empty(flat_grad.shape, dtype=flat_grad.dtype, device=flat_grad.device)
    n = x.numel()
    if n == 0:
        return out
    nb, elem = n // BLOCK, x.element_size()
    per_slot = slot_bytes(n, elem)
    buf = symmetric_buffer((2 * per_slot,), torch.uint8, tag="expert_quantized_grad_allreduce")
    key = ("calls", n, x.dtype)
    calls = _state.get(key, 0)
    _state[key] = calls + 1
    world = buf.world_size
    blocks = grid_blocks(nb, _sm_count(x.device), world)
    _module().function("quant_allreduce_" + _SUFFIX[x.dtype])(
        (blocks,), (THREADS,), x, out, buf.ptrs, buf.signal_pad_ptrs, i32(buf.rank), i32(world), i64(nb),
        i64(per_slot), i64(calls % 2), i32(int(two_shot(n, elem, world))))
    return out
