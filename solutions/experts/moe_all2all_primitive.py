"""The uneven all-to-all-v of an MoE dispatcher over symmetric memory, pull style, two kernels and one small
host read that overlaps the exchange.

Every call, on the caller's stream:
  1. the receive counts (output_split_sizes, 8 W bytes) are copied to a pinned host buffer (non-blocking) and
     an event is recorded: the only host read;
  2. `moe_publish` (one launch): every block copies its share of this rank's rows (the whole local_tensor,
     16-byte packs) into slot i % 2 of this rank's symmetric buffer, block 0 writes the send counts
     (input_split_sizes) into the slot's header, then `pkb_block_barrier`: block b waits for block b of
     every rank. When the kernel has ended on rank r, every block of every rank has passed its barrier, so
     every rank has published (rows and header) and the next kernel may read any of it;
  3. the host waits for the event only (the counts' copy, ahead of the publish on the stream: the wait
     overlaps the publish and its barrier instead of following them), sizes the output exactly,
     (sum(output_split_sizes), N), and launches
  4. `moe_pull`: grid (x, W), grid.y walks the sources p = (r + y) % W starting at r itself (the ranks spread
     their reads over different peers); a block reads p's header (p's send counts), finds the rows p sends
     to r at p's prefix sum up to r, and copies them, 16-byte packs over NVLink, to r's output at r's own
     prefix sum of output_split_sizes up to p (read on the device). The count is r's output_split_sizes[p]
     (equal to p's input_split_sizes[r] for a consistent routing; taking r's own bounds every write to the
     output r sized).
Why it beats the reference: NCCL's all_to_all_single needs both count lists on the host before it starts
(a blocking read that idles the GPU for a round trip, then the launches); here the host reads W counts
while the GPU is already publishing, and the exchange is two kernels with no NCCL proxy, no staging on the
receive side and each peer's rows read in place.

Why one host read: the output's row count depends on the counts and a tensor's shape lives on the host. The
alternative, an output allocated at the worst case and returned as a view, would save the wait but make a
buffer up to W times larger than the rows; the read is kept, ahead of the publish so that it costs no GPU time.
Only the receive counts cross (the send counts never leave the device: peers read them from the header).

Synchronisation: the buffer has two slots (call i uses slot i % 2), so no barrier follows the pull: a rank
writes a slot again two calls later, in a publish whose barrier it passes only once every peer has started
its next publish, i.e. finished its pull of this call (one stream per rank). Every call republishes rows and
header, so nothing carries over between calls. Every rank's local_tensor has the same shape (T * K, N),
the task's contract, so every rank asks for the same buffer. World size 1 runs the same path.
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import COPY_CUDA, SIGNAL_PAD_CUDA, compile_cuda, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
"""

_KERNELS = r"""
#define PKB_MOE_HEADER_BYTES 512   // a slot: the sender's split sizes (up to 64 int64), then its rows

__device__ __forceinline__ long long* moe_slot(long long base, long long slot_bytes, long long slot) {
    return reinterpret_cast<long long*>(base + slot * slot_bytes);
}

// This rank's rows (n elements) and send counts (ws int64) into its slot; then block b waits for block b
// of every rank (all blocks of the grid resident at once: at most one per SM).
template <typename T>
__device__ __forceinline__ void moe_publish(const T* __restrict__ local, const long long* __restrict__ send,
                                            const long long* ptrs, const unsigned long long* pads, int rank,
                                            int ws, long long n, long long slot_bytes, long long slot) {
    long long* header = moe_slot(ptrs[rank], slot_bytes, slot);
    T* rows = reinterpret_cast<T*>(reinterpret_cast<char*>(header) + PKB_MOE_HEADER_BYTES);
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    if (tid < ws) header[tid] = send[tid];
    copy_span<T>(rows, local, n, tid, nthreads);
    pkb_block_barrier(pads, rank, ws);
}

// From source p = (rank + blockIdx.y) % ws: the recv[p] rows p sends here (at p's prefix sum of its send
// counts up to rank) to out at this rank's prefix sum of recv up to p. cols: elements a row; cap_rows: the
// rows a slot holds (a guard against inconsistent counts: never read past the slot).
template <typename T>
__device__ __forceinline__ void moe_pull(const long long* ptrs, const long long* __restrict__ recv,
                                         T* __restrict__ out, int rank, int ws, long long cols,
                                         long long slot_bytes, long long slot, long long cap_rows) {
    const int p = (rank + (int)blockIdx.y) % ws;
    const long long* header = moe_slot(ptrs[p], slot_bytes, slot);
    long long src = 0, dst = 0;   // every thread: 2 ws loads, the same addresses across the warp
    for (int d = 0; d < rank; ++d) src += header[d];
    for (int s = 0; s < p; ++s) dst += recv[s];
    long long count = recv[p];
    if (src < 0 || src > cap_rows) src = cap_rows;
    if (count > cap_rows - src) count = cap_rows - src;
    if (count < 0) count = 0;
    const T* rows = reinterpret_cast<const T*>(reinterpret_cast<const char*>(header) + PKB_MOE_HEADER_BYTES);
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    copy_span<T>(out + dst * cols, rows + src * cols, count * cols, tid, nthreads);
}

#define PKB_MOE_A2A(SUFFIX, T)                                                                                \
    extern "C" __global__ void __launch_bounds__(512) moe_publish_##SUFFIX(                                  \
        const T* local, const long long* send, const long long* ptrs, const unsigned long long* pads,         \
        int rank, int ws, long long n, long long slot_bytes, long long slot) {                                \
        moe_publish<T>(local, send, ptrs, pads, rank, ws, n, slot_bytes, slot);                                \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(512) moe_pull_##SUFFIX(                                     \
        const long long* ptrs, const long long* recv, T* out, int rank, int ws, long long cols,              \
        long long slot_bytes, long long slot, long long cap_rows) {                                           \
        moe_pull<T>(ptrs, recv, out, rank, ws, cols, slot_bytes, slot, cap_rows);                              \
    }
PKB_MOE_A2A(f32, float)
PKB_MOE_A2A(bf16, __nv_bfloat16)
PKB_MOE_A2A(f16, __half)
"""

SRC = _HEADER + SIGNAL_PAD_CUDA + COPY_CUDA + _KERNELS

THREADS = 512
HEADER_BYTES = 512     # the kernels' PKB_MOE_HEADER_BYTES: up to 64 send counts
MAX_WORLD = HEADER_BYTES // 8
MAX_PAD_FLAGS = 2304   # the default signal pad: at most 2304 // world_size blocks may use it
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_state = {}


def slot_bytes(rows, cols, elem):
    """One slot: the header, then rows x cols elements, padded to 16 bytes (the next slot stays aligned)."""
    return HEADER_BYTES + -(-rows * cols * elem // 16) * 16


def publish_blocks(elements, elem, sms, world):
    """The publish kernel's grid: enough blocks for 16-byte packs of every element, at least one (every rank
    takes the barrier), at most one per SM (all resident, as the in-kernel barrier needs) and within the
    signal pad."""
    return max(1, min(-(-elements // ((16 // elem) * THREADS)), sms, MAX_PAD_FLAGS // world))


def pull_blocks(most_rows, cols, elem, sms, world):
    """The pull kernel's blocks per source (grid.x): enough for the largest source's rows, about two blocks
    per SM over all sources."""
    return max(1, min(-(-most_rows * cols // ((16 // elem) * THREADS)), max(1, 2 * sms // world)))


def _module():
    if "module" not in _state:
        _state["module"] = compile_cuda(SRC)
    return _state["module"]


def _sm_count(device):
    key = ("sms", device.index)
    if key not in _state:
        _state[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _state[key]


def _resources(x, group):
    """The cached buffer (2 slots), the pinned host copy of the receive counts and its event, per (shape,
    dtype, group); made once (the buffer's rendezvous is collective)."""
    key = (tuple(x.shape), x.dtype, id(group))
    if key not in _state:
        rows, cols = x.shape
        per_slot = slot_bytes(rows, cols, x.element_size())
        buf = symmetric_buffer((2 * per_slot,), torch.uint8, tag="expert_moe_all2all_primitive", group=group)
        try:
            host = torch.empty((buf.world_size,), dtype=torch.int64, pin_memory=True)
        except RuntimeError:   # no pinned memory: the copy below is then synchronous, still one read
            host = torch.empty((buf.world_size,), dtype=torch.int64)
        _state[key] = {"buf": buf, "slot_bytes": per_slot, "host": host, "counted": torch.cuda.Event()}
    return _state[key]


def next_slot(buf):
    """The slot this call uses: calls alternate per buffer (one count per buffer object, which
    `symmetric_buffer` caches for the process's life, so a buffer never restarts its alternation)."""
    key = ("calls", id(buf))
    calls = _state.get(key, 0)
    _state[key] = calls + 1
    return calls % 2


def solution(local_tensor, input_split_sizes, output_split_sizes, group):
    if local_tensor.dtype not in _SUFFIX:
        raise TypeError(f"moe_all2all_primitive expert takes float32, bfloat16 or float16, not {local_tensor.dtype}")
    if local_tensor.dim() != 2:
        raise ValueError(f"moe_all2all_primitive expert: local_tensor must be (rows, N), got {tuple(local_tensor.shape)}")
    group = group if group is not None else dist.group.WORLD
    x = local_tensor.contiguous()
    send = input_split_sizes.to(device=x.device, dtype=torch.int64).contiguous()
    recv_dev = output_split_sizes.to(device=x.device, dtype=torch.int64).contiguous()
    rows, cols = x.shape
    res = _resources(x, group)
    buf, per_slot = res["buf"], res["slot_bytes"]
    world = buf.world_size
    if world > MAX_WORLD or send.numel() != world or recv_dev.numel() != world:
        raise ValueError(f"moe_all2all_primitive expert: {world} ranks (at most {MAX_WORLD}), split sizes of "
                         f"{send.numel()} and {recv_dev.numel()}")
    slot = next_slot(buf)
    suffix, elem, sms = _SUFFIX[x.dtype], x.element_size(), _sm_count(x.device)

    host = res["host"]
    host.copy_(recv_dev, non_blocking=True)   # the one host read, queued ahead of the publish
    res["counted"].record()
    _module().function("moe_publish_" + suffix)(
        (publish_blocks(rows * cols, elem, sms, world),), (THREADS,), x, send, buf.ptrs, buf.signal_pad_ptrs,
        i32(buf.rank), i32(world), i64(rows * cols), i64(per_slot), i64(slot))
    res["counted"].synchronize()              # the counts only; the publish runs on
    recv = host.tolist()
    out = torch.empty((sum(recv), cols), dtype=x.dtype, device=x.device)
    if out.numel():
        blocks = pull_blocks(max(recv), cols, elem, sms, world)
        _module().function("moe_pull_" + suffix)(
            (blocks, world), (THREADS,), buf.ptrs, recv_dev, out, i32(buf.rank), i32(world), i64(cols),
            i64(per_slot), i64(slot), i64(rows))
    return out
