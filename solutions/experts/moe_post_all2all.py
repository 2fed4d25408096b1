"""MoE combine after the experts with no host read at all: every token's K expert outputs are read straight
from the expert ranks' symmetric buffers, weighed and added in one kernel.

The output is (T, N), a shape the host knows, so unlike the dispatch (PKB 27) nothing needs the counts on
the host. Every call, on the caller's stream:
  1. `routing_map.cumsum(1)` (int32, (E, T)): pos[e, t] - 1 is token t's place among this rank's tokens that
     picked expert e, i.e. its row within the chunk it sent to e (chunks are token-ascending);
  2. `moe_post_publish` (one launch): this rank's expert outputs, the first sum(output_splits) rows (summed on
     the device), into slot i % 2 of its symmetric buffer (16-byte packs) and its per-(source, local expert)
     counts num_global_tokens_per_local_expert into the slot's header; `pkb_block_barrier`; then block 0
     (which has seen block 0 of every rank, the one that wrote each header) computes, for every expert e, where
     this rank's chunk for e starts in the buffer of e's rank d: the rows of d's local experts before e's, from
     every source, plus the rows of e from the sources before this rank (the dispatch's [local expert][source]
     layout), into a small local table;
  3. `moe_combine`: a block per token (grid-stride); for each of its K picks e, the row
     base[e] + pos[e, t] - 1 of d's buffer, read over NVLink in 16-byte packs, times the pick's weight,
     accumulated in float32 by fused multiply-adds in pick order, rounded once to the dtype.
Why it beats the reference: the reference reads every count to the host (a blocking round trip), reorders its
expert outputs by source into a staging copy (split + cat), runs NCCL's all-to-all-v into a second buffer,
then weighs (a rounded product per pair) and scatter-adds (`index_add_`, another rounding per pick) in
separate launches. Here: no host synchronisation, three launches, each off-rank row crosses NVLink once and
is consumed where it lands (no receive buffer, no reorder), and one rounding per output element instead of
2K - 1, so the result is closer to the float64 golden than the reference's.

Synchronisation: two slots per buffer (call i uses slot i % 2, counted per buffer object) and no trailing
barrier: a rank writes a slot again two calls later, in a publish whose barrier it passes only once every
peer has started its next publish, i.e. finished reading this call's rows (one stream per rank). The base
table is local and is rewritten by every publish before the combine of the same call reads it. Every call
republishes rows and header: nothing carries over. Every rank's expert_outputs has the same shape (the
task's bound, W T min(K, E / W) rows), so every rank asks for the same buffer. World size 1 runs the same
path. input_splits and the permutation mapping are not needed: the routing map gives every position.
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import COPY_CUDA, SIGNAL_PAD_CUDA, compile_cuda, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
"""

_KERNELS = r"""
#define PKB_MOE_HEADER_BYTES 512   // a slot: the sender's counts per (source, local expert), then its rows
#define PKB_MOE_MAX_K 8

__device__ __forceinline__ long long* moe_slot(long long base, long long slot_bytes, long long slot) {
    return reinterpret_cast<long long*>(base + slot * slot_bytes);
}

__device__ __forceinline__ float moe_f32(float v) { return v; }
__device__ __forceinline__ float moe_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float moe_f32(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T moe_round(float v);
template <> __device__ __forceinline__ float moe_round<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 moe_round<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half moe_round<__half>(float v) { return __float2half_rn(v); }

// This rank's expert outputs (the first sum(recv) rows, at most cap_rows) and counts (experts int64: [source,
// local expert]) into its slot; block b waits for block b of every rank; then block 0 writes bases[e], the
// row where this rank's chunk for expert e starts in the buffer of e's rank.
template <typename T>
__device__ __forceinline__ void moe_post_publish(const T* __restrict__ outputs, const long long* __restrict__ recv,
                                                 const long long* __restrict__ counts, long long* __restrict__ bases,
                                                 const long long* ptrs, const unsigned long long* pads, int rank,
                                                 int ws, int experts, long long cols, long long cap_rows,
                                                 long long slot_bytes, long long slot) {
    long long* header = moe_slot(ptrs[rank], slot_bytes, slot);
    T* rows = reinterpret_cast<T*>(reinterpret_cast<char*>(header) + PKB_MOE_HEADER_BYTES);
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    long long filled = 0;
    for (int s = 0; s < ws; ++s) filled += recv[s];
    if (filled > cap_rows) filled = cap_rows;
    if (filled < 0) filled = 0;
    if (tid < experts) header[tid] = counts[tid];
    copy_span<T>(rows, outputs, filled * cols, tid, nthreads);
    pkb_block_barrier(pads, rank, ws);
    if (blockIdx.x == 0 && (int)threadIdx.x < experts) {
        const int local = experts / ws, e = threadIdx.x, d = e / local, l = e % local;
        const long long* theirs = moe_slot(ptrs[d], slot_bytes, slot);   // written by d's block 0
        long long base = 0;
        for (int lp = 0; lp < l; ++lp)
            for (int s = 0; s < ws; ++s) base += __ldcg(theirs + s * local + lp);
        for (int s = 0; s < rank; ++s) base += __ldcg(theirs + s * local + l);
        bases[e] = base;
    }
}

// out[t] = sum over k of weights[t, k] * (pick k's output row), float32 fused multiply-adds in pick order,
// one rounding. A block per token (grid-stride); 16-byte packs when rows are 16-byte aligned (vec), else
// single elements. A pick whose expert or row is out of range adds nothing (it cannot happen for a
// consistent routing; the guard keeps reads inside the buffers).
template <typename T>
__device__ __forceinline__ void moe_combine(const long long* ptrs, const long long* __restrict__ bases,
                                            const int* __restrict__ pos, const long long* __restrict__ selected,
                                            const T* __restrict__ weights, T* __restrict__ out, int ws, int experts,
                                            long long tokens, int k_picks, long long cols, long long cap_rows,
                                            long long slot_bytes, long long slot, int vec) {
    constexpr int V = 16 / sizeof(T);
    const int local = experts / ws;
    for (long long t = blockIdx.x; t < tokens; t += gridDim.x) {
        const T* src[PKB_MOE_MAX_K];
        float w[PKB_MOE_MAX_K];
        for (int k = 0; k < k_picks; ++k) {
            const long long e = selected[t * k_picks + k];
            src[k] = nullptr;
            w[k] = 0.0f;
            if (e < 0 || e >= experts) continue;
            const long long row = bases[e] + (long long)pos[e * tokens + t] - 1;
            if (row < 0 || row >= cap_rows) continue;
            const char* base = reinterpret_cast<const char*>(moe_slot(ptrs[e / local], slot_bytes, slot));
            src[k] = reinterpret_cast<const T*>(base + PKB_MOE_HEADER_BYTES) + row * cols;
            w[k] = moe_f32(weights[t * k_picks + k]);
        }
        T* dst = out + t * cols;
        if (vec) {
            for (long long p = threadIdx.x; p < cols / V; p += blockDim.x) {
                float acc[V];
#pragma unroll
                for (int i = 0; i < V; ++i) acc[i] = 0.0f;
                for (int k = 0; k < k_picks; ++k) {
                    if (src[k] == nullptr) continue;
                    const uint4 u = reinterpret_cast<const uint4*>(src[k])[p];
                    const T* x = reinterpret_cast<const T*>(&u);
#pragma unroll
                    for (int i = 0; i < V; ++i) acc[i] = fmaf(w[k], moe_f32(x[i]), acc[i]);
                }
                uint4 o;
                T* y = reinterpret_cast<T*>(&o);
#pragma unroll
                for (int i = 0; i < V; ++i) y[i] = moe_round<T>(acc[i]);
                reinterpret_cast<uint4*>(dst)[p] = o;
            }
        } else {
            for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
                float acc = 0.0f;
                for (int k = 0; k < k_picks; ++k)
                    if (src[k] != nullptr) acc = fmaf(w[k], moe_f32(src[k][c]), acc);
                dst[c] = moe_round<T>(acc);
            }
        }
    }
}

#define PKB_MOE_POST(SUFFIX, T)                                                                               \
    extern "C" __global__ void __launch_bounds__(512) moe_post_publish_##SUFFIX(                             \
        const T* outputs, const long long* recv, const long long* counts, long long* bases,                   \
        const long long* ptrs, const unsigned long long* pads, int rank, int ws, int experts, long long cols, \
        long long cap_rows, long long slot_bytes, long long slot) {                                           \
        moe_post_publish<T>(outputs, recv, counts, bases, ptrs, pads, rank, ws, experts, cols, cap_rows,     \
                            slot_bytes, slot);                                                                \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) moe_combine_##SUFFIX(                                  \
        const long long* ptrs, const long long* bases, const int* pos, const long long* selected,            \
        const T* weights, T* out, int ws, int experts, long long tokens, int k_picks, long long cols,         \
        long long cap_rows, long long slot_bytes, long long slot, int vec) {                                  \
        moe_combine<T>(ptrs, bases, pos, selected, weights, out, ws, experts, tokens, k_picks, cols, cap_rows, \
                       slot_bytes, slot, vec);                                                                \
    }
PKB_MOE_POST(f32, float)
PKB_MOE_POST(bf16, __nv_bfloat16)
PKB_MOE_POST(f16, __half)
"""

SRC = _HEADER + SIGNAL_PAD_CUDA + COPY_CUDA + _KERNELS

THREADS = 512          # the publish
COMBINE_THREADS = 128  # a token's row: 128 packs of 16 bytes at N = 1024 in bf16
HEADER_BYTES = 512     # the kernels' PKB_MOE_HEADER_BYTES: up to 64 counts
MAX_EXPERTS = HEADER_BYTES // 8
MAX_K = 8              # PKB_MOE_MAX_K
MAX_PAD_FLAGS = 2304   # the default signal pad: at most 2304 // world_size blocks may use it
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_state = {}


def slot_bytes(rows, cols, elem):
    """One slot: the header, then rows x cols elements, padded to 16 bytes (the next slot stays aligned)."""
    return HEADER_BYTES + -(-rows * cols * elem // 16) * 16


def publish_blocks(elements, elem, sms, world):
    """Enough blocks for 16-byte packs of every element, at least one (every rank takes the barrier), at most
    one per SM (all resident, as the in-kernel barrier needs) and within the signal pad."""
    return max(1, min(-(-elements // ((16 // elem) * THREADS)), sms, MAX_PAD_FLAGS // world))


def combine_blocks(tokens, sms):
    return max(1, min(tokens, 16 * sms))


def _module():
    if "module" not in _state:
        _state["module"] = compile_cuda(SRC)
    return _state["module"]


def _sm_count(device):
    key = ("sms", device.index)
    if key not in _state:
        _state[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _state[key]


def _resources(x, experts, group):
    """The cached buffer (2 slots) and the base table, per (shape, dtype, experts, group); made once (the
    buffer's rendezvous is collective)."""
    key = (tuple(x.shape), x.dtype, experts, id(group))
    if key not in _state:
        rows, cols = x.shape
        per_slot = slot_bytes(rows, cols, x.element_size())
        buf = symmetric_buffer((2 * per_slot,), torch.uint8, tag="expert_moe_post_all2all", group=group)
        _state[key] = {"buf": buf, "slot_bytes": per_slot,
                       "bases": torch.zeros((experts,), dtype=torch.int64, device=x.device)}
    return _state[key]


def next_slot(buf):
    """The slot this call uses: calls alternate per buffer (one count per buffer object, which
    `symmetric_buffer` caches for the process's life, so a buffer never restarts its alternation)."""
    key = ("calls", id(buf))
    calls = _state.get(key, 0)
    _state[key] = calls + 1
    return calls % 2


def solution(expert_outputs, routing_weights, selected_experts, num_experts, input_splits, output_splits,
             num_global_tokens_per_local_expert, routing_map, local_input_permutation_mapping, group):
    if expert_outputs.dtype not in _SUFFIX:
        raise TypeError(f"moe_post_all2all expert takes float32, bfloat16 or float16, not {expert_outputs.dtype}")
    group = group if group is not None else dist.group.WORLD
    x = expert_outputs.contiguous()
    device = x.device
    cap, cols = x.shape
    tokens, k_picks = selected_experts.shape
    experts = int(num_experts)
    res = _resources(x, experts, group)
    buf, per_slot = res["buf"], res["slot_bytes"]
    world = buf.world_size
    if experts > MAX_EXPERTS or experts % world or k_picks > MAX_K:
        raise ValueError(f"moe_post_all2all expert: {experts} experts over {world} ranks (at most {MAX_EXPERTS}, "
                         f"a multiple of the ranks), {k_picks} picks (at most {MAX_K})")
    slot = next_slot(buf)
    suffix, elem, sms = _SUFFIX[x.dtype], x.element_size(), _sm_count(device)
    recv = output_splits.to(device=device, dtype=torch.int64).contiguous()
    counts = num_global_tokens_per_local_expert.to(device=device, dtype=torch.int64).contiguous()
    selected = selected_experts.to(device=device, dtype=torch.int64).contiguous()
    weights = routing_weights.to(device=device, dtype=x.dtype).contiguous()
    pos = routing_map.to(device).cumsum(dim=1, dtype=torch.int32)   # (E, T): 1 + place among e's tokens

    module = _module()
    module.function("moe_post_publish_" + suffix)(
        (publish_blocks(cap * cols, elem, sms, world),), (THREADS,), x, recv, counts, res["bases"], buf.ptrs,
        buf.signal_pad_ptrs, i32(buf.rank), i32(world), i32(experts), i64(cols), i64(cap), i64(per_slot), i64(slot))
    out = torch.empty((tokens, cols), dtype=x.dtype, device=device)
    if out.numel():
        vec = int((cols * elem) % 16 == 0)
        module.function("moe_combine_" + suffix)(
            (combine_blocks(tokens, sms),), (COMBINE_THREADS,), buf.ptrs, res["bases"], pos, selected, weights, out,
            i32(world), i32(experts), i64(tokens), i32(k_picks), i64(cols), i64(cap), i64(per_slot), i64(slot),
            i32(vec))
    return out
