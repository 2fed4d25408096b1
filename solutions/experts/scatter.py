"""Scatter over symmetric memory: every rank pulls its own chunk from the root's buffer.

The root publishes its (W, M, N) chunks in its symmetric buffer (the other ranks' chunks are ignored, so
they publish nothing); after a stream-ordered signal-pad barrier rank r copies chunk r of the root's
buffer into a fresh (M, N) output with 16-byte loads and stores where source and destination share their
alignment. A final barrier keeps the root from overwriting its buffer on the next call while a slow peer
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
// out = chunk `rank` (n elements) of the root's buffer.
template <typename T>
__device__ __forceinline__ void scatter(const long long* ptrs, T* out, int src, int rank, long long n) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
    copy_span<T>(out, reinterpret_cast<const T*>(ptrs[src]) + (long long)rank * n, n, tid, nthreads);
}

extern "C" __global__ void __launch_bounds__(512) sc_f32(const long long* ptrs, float* out, int src, int rank, long long n) {
    scatter<float>(ptrs, out, src, rank, n);
}
extern "C" __global__ void __launch_bounds__(512) sc_bf16(const long long* ptrs, __nv_bfloat16* out, int src, int rank, long long n) {
    scatter<__nv_bfloat16>(ptrs, out, src, rank, n);
}
extern "C" __global__ void __launch_bounds__(512) sc_f16(const long long* ptrs, __half* out, int src, int rank, long long n) {
    scatter<__half>(ptrs, out, src, rank, n);
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


def solution(chunks, src):
    if chunks.dtype not in _SUFFIX:
        raise TypeError(f"scatter expert supports float32, bfloat16 and float16, not {chunks.dtype}")
    src, ws = int(src), dist.get_world_size()
    if chunks.dim() < 1 or chunks.shape[0] != ws:
        raise ValueError(f"scatter expects (W, M, N) chunks with W = {ws}, got {tuple(chunks.shape)}")
    if not 0 <= src < ws:
        raise ValueError(f"src {src} is not a rank of a world of {ws}")
    out = torch.empty(chunks.shape[1:], dtype=chunks.dtype, device=chunks.device)
    n = out.numel()  # elements per chunk
    if n == 0:
        return out
    buf = symmetric_buffer((chunks.numel(),), chunks.dtype, tag="expert_scatter")
    if buf.rank == src:
        buf.local.view(chunks.shape).copy_(chunks)  # only the root's chunks are read
    buf.barrier()                                   # the root's chunks are in its buffer

    vec = 16 // chunks.element_size()
    blocks = max(1, min(-(-n // (vec * THREADS)), 2 * _sm_count(chunks.device)))
    _module().function("sc_" + _SUFFIX[chunks.dtype])((blocks,), (THREADS,), buf.ptrs, out, i32(src),
                                                      i32(buf.rank), i64(n))
    buf.barrier()  # the root may not overwrite its buffer while a peer still reads it
    return out
