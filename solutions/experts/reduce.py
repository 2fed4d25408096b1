"""Reduce (sum) to one rank over symmetric memory: the root pulls and sums every rank's buffer.

Every rank publishes its (M, N) tensor in its symmetric buffer; after a stream-ordered signal-pad
barrier only the root runs a kernel, which reads every rank's buffer with 16-byte loads (the loads of all
ranks issued before the adds: the world size is a template parameter) and sums them in float32, in rank
order, into a fresh output. The other ranks return None but still take part in both barriers: the final
one keeps every rank from overwriting its buffer on the next call while the root still reads it.
"""
import torch
import torch.distributed as dist

from pkb_env.runtime import REDUCE_CUDA, compile_cuda, i32, i64, symmetric_buffer

_HEADER = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
"""

_KERNELS = r"""
// out = sum over all ranks of their whole buffers (n elements).
template <typename T>
__device__ __forceinline__ void reduce_to_root(const long long* ptrs, T* out, int ws, long long n) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    PKB_FOR_WORLD_SIZE(ws, (reduce_span<T, W>(out, nullptr, ptrs, ws, 0, n, tid, nthreads)));
}

extern "C" __global__ void __launch_bounds__(512) rd_f32(const long long* ptrs, float* out, int ws, long long n) {
    reduce_to_root<float>(ptrs, out, ws, n);
}
extern "C" __global__ void __launch_bounds__(512) rd_bf16(const long long* ptrs, __nv_bfloat16* out, int ws, long long n) {
    reduce_to_root<__nv_bfloat16>(ptrs, out, ws, n);
}
extern "C" __global__ void __launch_bounds__(512) rd_f16(const long long* ptrs, __half* out, int ws, long long n) {
    reduce_to_root<__half>(ptrs, out, ws, n);
}
"""

SRC = _HEADER + REDUCE_CUDA + _KERNELS

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


def solution(tensor, dst):
    if tensor.dtype not in _SUFFIX:
        raise TypeError(f"reduce expert supports float32, bfloat16 and float16, not {tensor.dtype}")
    dst, ws, rank = int(dst), dist.get_world_size(), dist.get_rank()
    if not 0 <= dst < ws:
        raise ValueError(f"dst {dst} is not a rank of a world of {ws}")
    n = tensor.numel()
    if n == 0:
        return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device) if rank == dst else None
    buf = symmetric_buffer((n,), tensor.dtype, tag="expert_reduce")
    buf.local.view(tensor.shape).copy_(tensor)  # publish
    buf.barrier()                               # every rank's tensor is in its buffer
    out = None
    if buf.rank == dst:
        out = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
        vec = 16 // tensor.element_size()
        blocks = max(1, min(-(-n // (vec * THREADS)), 2 * _sm_count(tensor.device)))
        _module().function("rd_" + _SUFFIX[tensor.dtype])((blocks,), (THREADS,), buf.ptrs, out, i32(ws), i64(n))
    buf.barrier()  # no rank may overwrite its buffer while the root still reads it
    return out
