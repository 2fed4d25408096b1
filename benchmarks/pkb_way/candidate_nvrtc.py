"""The same all_reduce candidate as candidate_load_inline.py, built through pkb-env's kernel runtime.

`compile_cuda` compiles the kernel with NVRTC (inside pkb-env: once per step for all ranks, cached by
the judge; outside it: locally through CuPy), in a fraction of a second instead of load_inline's
minute of nvcc on the torch headers. The kernel is launched on torch's current stream.

Semantics as in candidate_load_inline.py: at world size 1 the all-reduce is the identity and
`solution` returns a copy made by a vectorised 16-byte copy kernel; at world size > 1 it falls back to
NCCL (dist.all_reduce on a clone), i.e. the reference itself.
"""
import torch
import torch.distributed as dist
from pkb_env.runtime import compile_cuda, i64

SRC = r"""
// Copy nbytes from src to dst: 16-byte vectors for the bulk, single bytes for the tail.
// Both pointers must be 16-byte aligned (solution checks).
extern "C" __global__ void pkb_vec_copy(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                        long long nbytes) {
    const long long n16 = nbytes >> 4;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* __restrict__ s = reinterpret_cast<const uint4*>(src);
    uint4* __restrict__ d = reinterpret_cast<uint4*>(dst);
    for (long long i = first; i < n16; i += stride) d[i] = s[i];
    for (long long i = (n16 << 4) + first; i < nbytes; i += stride) dst[i] = src[i];
}
"""

_copy = compile_cuda(SRC).function("pkb_vec_copy")
_THREADS = 256
_MAX_BLOCKS = 1056  # 8 blocks per SM on a 132-SM H100/H200; the kernel's loop strides over the rest


def solution(tensor: torch.Tensor) -> torch.Tensor:
    if dist.get_world_size() > 1:
        # No custom kernel at world size > 1: NCCL on a clone (correct, and as fast as the reference).
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out
    src = tensor.contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    nbytes = src.numel() * src.element_size()
    if nbytes == 0:
        return out
    if (src.data_ptr() | out.data_ptr()) & 15:  # a view at an odd offset: not worth a second kernel here
        out.copy_(src)
        return out
    blocks = max(1, min(_MAX_BLOCKS, ((nbytes >> 4) + _THREADS - 1) // _THREADS))
    _copy((blocks,), (_THREADS,), src, out, i64(nbytes))
    return out
