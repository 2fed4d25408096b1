"""All-gather over symmetric memory, pull style.

Every rank publishes its (M, N) tensor in its symmetric buffer, a stream-ordered signal-pad barrier
makes sure every rank has, then one kernel reads rank j's buffer into out[j] for every j (grid.y walks
the ranks starting at this rank itself, so the ranks spread their reads over different peers) with
16-byte loads and stores where source and destination share their alignment. A final barrier keeps a fast rank from overwriting its buffer while a slow peer
still reads it.
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import COPY_CUDA, compile_cuda, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
"""

_KERNELS = r"""
// out[p] = rank p's buffer (n elements), p = (rank + blockIdx.y) % ws.
template <typename T>
__device__ __forceinline__ void all_gather(const long long* ptrs, T* out, int rank, int ws, long long n) {
    const int p = (rank + (int)blockIdx.y) % ws;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    copy_span<T>(out + (long long)p * n, reinterpret_cast<const T*>(ptrs[p]), n, tid, nthreads);
}

extern "C" __global__ void __launch_bounds__(512) ag_f32(const long long* ptrs, float* out, int rank, int ws, long long n) {
    all_gather<float>(ptrs, out, rank, ws, n);
}
extern "C" __global__ void __launch_bounds__(512) ag_bf16(const long long* ptrs, __nv_bfloat16* out, int rank, int ws, long long n) {
    all_gather<__nv_bfloat16>(ptrs, out, rank, ws, n);
}
extern "C" __global__ void __launch_bounds__(512) ag_f16(const long long* ptrs, __half* out, int rank, int ws, long long n) {
    all_gather<__half>(ptrs, out, rank, ws, n);
}
"""

SRC = _HEADER + COPY_CUDA + _KERNELS

THREADS = 512
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


def solution(tensor):
    if tensor.dtype not in _SUFFIX:
        raise TypeError(f"all_gather expert supports float32, bfloat16 and float16, not {tensor.dtype}")
    n, ws = tensor.numel(), dist.get_world_size()
    out = torch.empty((ws, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    if n == 0:
        return out
    buf = symmetric_buffer((n,), tensor.dtype, tag="expert_all_gather")
    buf.local.view(tensor.shape).copy_(tensor)  # publish
    buf.barrier()                               # every rank's tensor is in its buffer

    vec = 16 // tensor.element_size()
    per_rank = max(1, (2 * _sm_count(tensor.device)) // ws)
    blocks_x = max(1, min(-(-n // (vec * THREADS)), per_rank))
    _module().function("ag_" + _SUFFIX[tensor.dtype])((blocks_x, ws), (THREADS,), buf.ptrs, out,
                                                      i32(buf.rank), i32(ws), i64(n))
    buf.barrier()  # no rank may overwrite its buffer while a peer still reads it
    return out
