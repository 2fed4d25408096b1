"""Distributed sort into exactly balanced slices over symmetric memory: no splitters, no all-to-all-v.

Every call:
  publish   the local sort (torch.sort) writes straight into this rank's slot of a symmetric buffer;
  split     one kernel of two blocks: each writes this rank's count n into a small symmetric counts buffer
            and passes an in-kernel barrier (`pkb_block_barrier`), reads all ranks' counts (T, and this
            rank's global range [lo, hi)); then block 0 finds the co-rank split of position lo and block 1
            that of hi: how many of each rank's sorted values come before that position in the merged order.
            Ties are ordered by (value, rank, index), so the split is unique. The search narrows, per
            rank q, an interval [lo_q, hi_q] holding the split c_q: each round, every thread takes one
            sample e inside some rank's interval (1024 / W samples a rank, evenly spaced: an interval of at
            most that many is resolved in one round) and counts, by W interleaved binary searches in the
            peers' buffers (over NVLink), how many values of each rank precede e; e's global rank says
            whether e lies before the position, which bounds every c_q (atomicMax / atomicMin in shared
            memory). The searches only look one element beyond the current intervals: a count that falls
            outside an interval already decides the sample's side. So a round costs about log2 of the
            intervals' length in dependent remote loads, and rounds shrink the intervals by 1024 / W;
  gather    one kernel copies rank q's run [c_q(lo), c_q(hi)) out of its buffer into a local scratch, each
            run placed at an offset with the source's 16-byte alignment, so the copy uses 16-byte packs;
  merge     one kernel writes every gathered value to its place in the output: its index in its run plus
            the number of values of the other runs that precede it ((value, run, index) order, binary
            searches in the local scratch). The task compares exactly, position by position, and returns
            values only: equal values are bit-identical (the task's values are integers cast to the dtype:
            no -0.0 beside +0.0, no NaN), so any tie order gives the golden's output; the (value, rank,
            index) order only makes the splits well defined and the places a permutation.

One host read, and why it cannot go: the output's length (T // W or T // W + 1) depends on every rank's
count, and a torch tensor's shape lives on the host, so the host must learn it before it returns. The split
kernel computes the length on the device; an asynchronous copy brings it, with the largest count, to pinned
host memory, and an event after that copy is the only wait: the gather kernel is already queued behind it
and runs while the host waits. With a small buffer (up to EARLY_OUT_BYTES: `bench`) the merge is queued
too, into an output allocated at the buffer's capacity (every output is at most the largest count), and the
host returns a slice of it as soon as the length arrives; with a large one the output is allocated at its
exact length after the wait and only the merge is launched then (its launch is small next to its work).
The reference reads counts on the host twice, makes five collective rounds (samples all-gather, counts
all-to-all, all-to-all-v, sizes all-gather, all-to-all-v) and sorts what arrived a second time.

Buffer capacity: every rank's buffer must hold its n, but a rank learns its peers' n only on the device, and
allocating a symmetric buffer is collective. So the buffer keeps a capacity (at least 2^16 values, a power
of two) and a rank whose n exceeds it publishes nothing; the split kernel sees the largest count, writes
empty splits, and the host (every rank reads the same largest count) grows the buffer on every rank at once
and redoes the call. That happens once per growth, not per call.

Synchronisation: the counts and data buffers have two slots (call i uses slot i % 2, one counter for all
dtypes of a group) and there is no trailing barrier: a rank writes a slot again two calls later, after the
split kernel's barrier of the call between, which a peer reaches only after its gather of this slot (its
last remote read, on the same stream) is done.

World sizes 1 to 8 (the split kernel keeps per-rank state in registers unrolled over 8 ranks).
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import COPY_CUDA, SIGNAL_PAD_CUDA, compile_cuda, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define PKB_MAX_WORLD 8
"""

_KERNELS = r"""
__device__ __forceinline__ float sort_key(float x) { return x; }
__device__ __forceinline__ float sort_key(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float sort_key(__half x) { return __half2float(x); }

// Rank p's sorted values in slot `slot` of its data buffer (slots of `cap` values).
template <typename T>
__device__ __forceinline__ const T* slot_values(const long long* ptrs, int p, int slot, long long cap) {
    return reinterpret_cast<const T*>(ptrs[p]) + (long long)slot * cap;
}

// Global position where rank r's slice starts: r * (T / W) + min(r, T % W).
__device__ __forceinline__ long long slice_start(long long total, int ws, int r) {
    const long long base = total / ws, extra = total % ws;
    return (long long)r * base + (r < extra ? (long long)r : extra);
}

// Publishes this rank's count n (both blocks write it, so each block's barrier covers its own write), then
// the co-rank split of position k = slice_start(rank + blockIdx.x): meta[blockIdx.x * ws + q] = how many of
// rank q's values come before position k in the (value, rank, index) order. Block 0 also writes
// info = [this rank's output length, the largest count, T]. Two blocks; every thread of both takes part in
// the opening barrier. A count above `cap` (a rank could not publish) gives empty splits.
template <typename T>
__device__ void split(const long long* ptrs, const unsigned long long* pads, const long long* count_ptrs,
                      long long* meta, long long* info, long long n, int rank, int ws, int slot, long long cap) {
    __shared__ int n_s[PKB_MAX_WORLD], lo_s[PKB_MAX_WORLD], hi_s[PKB_MAX_WORLD];
    __shared__ int nlo_s[PKB_MAX_WORLD], nhi_s[PKB_MAX_WORLD];
    __shared__ long long count_s[PKB_MAX_WORLD];
    __shared__ int done_s;
    const int t = threadIdx.x;
    if (t == 0) reinterpret_cast<long long*>(count_ptrs[rank])[slot] = n;
    pkb_block_barrier(pads, rank, ws);   // every rank's count and values are published
    if (t < ws) count_s[t] = __ldcg(reinterpret_cast<const long long*>(count_ptrs[t]) + slot);
    __syncthreads();
    long long total = 0, largest = 0;
    for (int q = 0; q < ws; ++q) {
        total += count_s[q];
        largest = count_s[q] > largest ? count_s[q] : largest;
    }
    const bool overflow = largest > cap;
    if (t < ws) n_s[t] = overflow ? 0 : (int)count_s[t];
    if (blockIdx.x == 0 && t == 0) {
        info[0] = overflow ? 0 : slice_start(total, ws, rank + 1) - slice_start(total, ws, rank);
        info[1] = largest;
        info[2] = total;
    }
    if (overflow) {
        if (t < ws) meta[blockIdx.x * ws + t] = 0;
        return;
    }
    const long long k = slice_start(total, ws, rank + (int)blockIdx.x);
    if (t < ws) {   // the split is at least what the others cannot hold, at most min(n_q, k)
        const long long rest = total - n_s[t];
        lo_s[t] = k > rest ? (int)(k - rest) : 0;
        hi_s[t] = k < n_s[t] ? (int)k : n_s[t];
    }
    const int per = blockDim.x / ws;     // samples per rank and round
    const int p = t / per, j = t % per;
    for (int round = 0; round < 64; ++round) {
        __syncthreads();
        if (t == 0) {
            int open = 0;
            for (int q = 0; q < ws; ++q) open |= hi_s[q] > lo_s[q];
            done_s = !open;
        }
        if (t < ws) { nlo_s[t] = lo_s[t]; nhi_s[t] = hi_s[t]; }
        __syncthreads();
        if (done_s) break;
        const int len = p < ws ? hi_s[p] - lo_s[p] : 0;
        const int m = len < per ? len : per;
        if (j < m) {
            const int pos = lo_s[p] + (int)(((long long)j * len) / m);
            const float v = sort_key(__ldcg(slot_values<T>(ptrs, p, slot, cap) + pos));
            // rank q's values before e = (v, p, pos): x <= v for q < p, x < v for q > p, searched in
            // [lo_q - 1, hi_q + 1]; a result outside [lo_q, hi_q] already decides e's side
            int a[PKB_MAX_WORLD], b[PKB_MAX_WORLD];
#pragma unroll
            for (int q = 0; q < PKB_MAX_WORLD; ++q) {
                if (q < ws && q != p) {
                    a[q] = lo_s[q] > 0 ? lo_s[q] - 1 : 0;
                    b[q] = hi_s[q] < n_s[q] ? hi_s[q] + 1 : n_s[q];
                } else {
                    a[q] = b[q] = 0;
                }
            }
            bool open = true;
            while (open) {
                float x[PKB_MAX_WORLD];
#pragma unroll
                for (int q = 0; q < PKB_MAX_WORLD; ++q)   // every rank's load in flight at once
                    if (a[q] < b[q]) x[q] = sort_key(__ldcg(slot_values<T>(ptrs, q, slot, cap) + ((a[q] + b[q]) >> 1)));
                open = false;
#pragma unroll
                for (int q = 0; q < PKB_MAX_WORLD; ++q) {
                    if (a[q] < b[q]) {
                        const int mid = (a[q] + b[q]) >> 1;
                        if (q < p ? x[q] <= v : x[q] < v) a[q] = mid + 1; else b[q] = mid;
                        open = open || a[q] < b[q];
                    }
                }
            }
            bool below = false, above = false;
            long long before = pos;
#pragma unroll
            for (int q = 0; q < PKB_MAX_WORLD; ++q) {
                if (q < ws && q != p) {
                    below = below || a[q] < lo_s[q];
                    above = above || a[q] > hi_s[q];
                    before += a[q];
                }
            }
            const bool inside = below || (!above && before < k);   // e comes before position k
#pragma unroll
            for (int q = 0; q < PKB_MAX_WORLD; ++q) {
                if (q < ws) {
                    int c = q == p ? pos : (a[q] < lo_s[q] ? lo_s[q] : (a[q] > hi_s[q] ? hi_s[q] : a[q]));
                    if (inside) atomicMax(&nlo_s[q], c + (q == p ? 1 : 0)); else atomicMin(&nhi_s[q], c);
                }
            }
        }
        __syncthreads();
        if (t < ws) { lo_s[t] = nlo_s[t]; hi_s[t] = nhi_s[t]; }
    }
    __syncthreads();
    if (t < ws) meta[blockIdx.x * ws + t] = lo_s[t];
}

// Rank q's run [meta[q], meta[ws + q]): its start in q's buffer, its length, and its offset in the scratch:
// after the runs before it plus q * V values, at the source's alignment modulo V = 16 / sizeof(T).
template <typename T>
__device__ __forceinline__ void run_layout(const long long* meta, int ws, int q, long long& src, long long& len,
                                           long long& dst, long long& packed) {
    constexpr long long V = 16 / sizeof(T);
    packed = 0;
    for (int i = 0; i < q; ++i) packed += meta[ws + i] - meta[i];
    src = meta[q];
    len = meta[ws + q] - src;
    const long long base = packed + (long long)q * V;
    dst = base + (((src - base) % V) + V) % V;
}

// Block row y copies rank (rank + y) % ws's run into the scratch.
template <typename T>
__device__ void gather(const long long* ptrs, const long long* meta, T* scratch, int rank, int ws, int slot,
                       long long cap) {
    const int q = (rank + (int)blockIdx.y) % ws;
    long long src, len, dst, packed;
    run_layout<T>(meta, ws, q, src, len, dst, packed);
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    copy_span<T>(scratch + dst, slot_values<T>(ptrs, q, slot, cap) + src, len, tid, (long long)gridDim.x * blockDim.x);
}

// out[index in its run + the other runs' values before it] = every gathered value.
template <typename T>
__device__ void merge(const long long* meta, const T* scratch, T* out, int ws) {
    __shared__ long long start_s[PKB_MAX_WORLD], len_s[PKB_MAX_WORLD], packed_s[PKB_MAX_WORLD];
    if (threadIdx.x < ws) {
        long long src, len, dst, packed;
        run_layout<T>(meta, ws, threadIdx.x, src, len, dst, packed);
        start_s[threadIdx.x] = dst; len_s[threadIdx.x] = len; packed_s[threadIdx.x] = packed;
    }
    __syncthreads();
    const long long total = packed_s[ws - 1] + len_s[ws - 1];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int r = 0;
        while (i >= packed_s[r] + len_s[r]) ++r;
        const long long index = i - packed_s[r];
        const T value = scratch[start_s[r] + index];
        const float v = sort_key(value);
        long long a[PKB_MAX_WORLD], b[PKB_MAX_WORLD];
#pragma unroll
        for (int q = 0; q < PKB_MAX_WORLD; ++q) {
            const bool other = q < ws && q != r;
            a[q] = other ? start_s[q] : 0;
            b[q] = other ? start_s[q] + len_s[q] : 0;
        }
        bool open = true;
        while (open) {
            float x[PKB_MAX_WORLD];
#pragma unroll
            for (int q = 0; q < PKB_MAX_WORLD; ++q)
                if (a[q] < b[q]) x[q] = sort_key(scratch[(a[q] + b[q]) >> 1]);
            open = false;
#pragma unroll
            for (int q = 0; q < PKB_MAX_WORLD; ++q) {
                if (a[q] < b[q]) {
                    const long long mid = (a[q] + b[q]) >> 1;
                    if (q < r ? x[q] <= v : x[q] < v) a[q] = mid + 1; else b[q] = mid;
                    open = open || a[q] < b[q];
                }
            }
        }
        long long place = index;
#pragma unroll
        for (int q = 0; q < PKB_MAX_WORLD; ++q)
            if (q < ws && q != r) place += a[q] - start_s[q];
        out[place] = value;
    }
}

#define SORT_KERNELS(SUFFIX, T) \
extern "C" __global__ void __launch_bounds__(1024) sort_split_##SUFFIX(const long long* ptrs, const unsigned long long* pads, const long long* count_ptrs, long long* meta, long long* info, long long n, int rank, int ws, int slot, long long cap) { \
    split<T>(ptrs, pads, count_ptrs, meta, info, n, rank, ws, slot, cap); } \
extern "C" __global__ void __launch_bounds__(512) sort_gather_##SUFFIX(const long long* ptrs, const long long* meta, T* scratch, int rank, int ws, int slot, long long cap) { \
    gather<T>(ptrs, meta, scratch, rank, ws, slot, cap); } \
extern "C" __global__ void __launch_bounds__(512) sort_merge_##SUFFIX(const long long* meta, const T* scratch, T* out, int ws) { \
    merge<T>(meta, scratch, out, ws); }

SORT_KERNELS(f32, float)
SORT_KERNELS(bf16, __nv_bfloat16)
SORT_KERNELS(f16, __half)
"""

SRC = _HEADER + SIGNAL_PAD_CUDA + COPY_CUDA + _KERNELS

SPLIT_THREADS = 1024   # the split kernel's block: 1024 / W samples a rank and round
THREADS = 512
MAX_WORLD = 8
MIN_CAPACITY = 1 << 16  # values a slot holds at least; grown to a power of two when a count exceeds it
EARLY_OUT_BYTES = 1 << 20   # up to this capacity, the output is allocated at capacity and merged before the wait
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_state = {}


def _module():
    if "module" not in _state:
        _state["module"] = compile_cuda(SRC)
    return _state["module"]


def _sm_count(device):
    key = ("sms", device.index)
    if key not in _state:
        _state[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _state[key]


def capacity_for(largest: int) -> int:
    """The slot capacity that holds `largest` values: a power of two, at least MIN_CAPACITY."""
    cap = MIN_CAPACITY
    while cap < largest:
        cap *= 2
    return cap


def scratch_size(cap: int, world: int, element_size: int) -> int:
    """The gathered runs (at most `cap` values: an output is at most the largest count) plus up to
    16 / element_size - 1 values of alignment padding before each run."""
    return cap + world * (16 // element_size)


def _group_state(group, device, world):
    """Per group: the counts buffer, the call counter (one for every dtype: the slots alternate across
    them), the split metadata, the pinned host copy of the split kernel's info, and an event."""
    key = ("group", id(group))
    if key not in _state:
        _state[key] = {
            "counts": symmetric_buffer((2,), torch.int64, tag="expert_distributed_sample_sort_counts", group=group),
            "calls": 0,
            "caps": {},
            "meta": torch.zeros(2 * world, dtype=torch.int64, device=device),
            "info": torch.zeros(4, dtype=torch.int64, device=device),
            "info_host": torch.zeros(4, dtype=torch.int64, pin_memory=True),
            "event": torch.cuda.Event(),
        }
    return _state[key]


def _attempt(values, group, st, world):
    """One try; None when some rank's count exceeded the buffer (it has grown on every rank: try again)."""
    dtype, device, n = values.dtype, values.device, values.numel()
    cap = st["caps"].setdefault(dtype, MIN_CAPACITY)
    data = symmetric_buffer((2, cap), dtype, tag="expert_distributed_sample_sort", group=group)
    counts = st["counts"]
    slot = st["calls"] % 2
    st["calls"] += 1
    if 0 < n <= cap:                                # publish the sorted values (the split kernel: the count)
        torch.sort(values, out=(data.local[slot, :n], torch.empty(n, dtype=torch.int64, device=device)))
    mod, suffix = _module(), _SUFFIX[dtype]
    mod.function("sort_split_" + suffix)((2,), (SPLIT_THREADS,), data.ptrs, counts.signal_pad_ptrs, counts.ptrs,
                                         st["meta"], st["info"], i64(n), i32(data.rank), i32(world), i32(slot),
                                         i64(cap))
    st["info_host"].copy_(st["info"], non_blocking=True)
    st["event"].record()
    vec, size = 16 // values.element_size(), values.element_size()
    scratch = torch.empty(scratch_size(cap, world, size), dtype=dtype, device=device)
    sms = _sm_count(device)
    blocks = max(1, min(-(-max(n, 1) // (vec * THREADS)), max(1, (2 * sms) // world)))
    mod.function("sort_gather_" + suffix)((blocks, world), (THREADS,), data.ptrs, st["meta"], scratch,
                                          i32(data.rank), i32(world), i32(slot), i64(cap))
    merge = mod.function("sort_merge_" + suffix)
    early = cap * size <= EARLY_OUT_BYTES
    if early:   # small: the merge queued before the wait too, into an output of the capacity (a slice returned)
        out = torch.empty(cap, dtype=dtype, device=device)
        merge((max(1, min(-(-max(n, 1) // THREADS), 4 * sms)),), (THREADS,), st["meta"], scratch, out, i32(world))
    st["event"].synchronize()                       # the only host wait: the output's length
    length, largest = st["info_host"][:2].tolist()
    if largest > cap:                               # the same on every rank: grow together, redo the call
        st["caps"][dtype] = capacity_for(largest)
        return None
    if early:
        return out[:length]
    out = torch.empty(length, dtype=dtype, device=device)
    if length:
        merge((max(1, min(-(-length // THREADS), 4 * sms)),), (THREADS,), st["meta"], scratch, out, i32(world))
    return out


@torch.no_grad()
def solution(values, group):
    if values.dtype not in _SUFFIX:
        raise TypeError(f"distributed_sample_sort expert supports float32, bfloat16 and float16, not {values.dtype}")
    world = dist.get_world_size(group)
    if world > MAX_WORLD:
        raise ValueError(f"distributed_sample_sort expert: world sizes 1..{MAX_WORLD}, got {world}")
    st = _group_state(group, values.device, world)
    while True:
        out = _attempt(values.reshape(-1), group, st, world)
        if out is not None:
            return out
