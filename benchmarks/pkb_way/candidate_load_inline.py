"""A small CUDA candidate for the all_reduce task, written the way PKB's CUDA solutions are built.

The CUDA source is compiled at import time with torch.utils.cpp_extension.load_inline: a C++
declaration in `cpp_sources`, the kernel and its launcher in `cuda_sources`, and `functions=[...]` so
that torch writes the Python bindings (no PYBIND11_MODULE of our own). This is the slow build path that
PKB's harness pays for in every rank's own TORCH_EXTENSIONS_DIR (nvcc on the torch headers: about a
minute the first time).

Semantics: at world size 1 an all-reduce (sum over one rank) is the identity, so `solution` returns a
new tensor holding a copy of the input, made by a vectorised 16-byte copy kernel. At world size > 1
this file does not implement a custom all-reduce: it falls back to NCCL (dist.all_reduce on a clone),
which is correct but is just the reference again. The kernel exists to measure the judging cost of a
CUDA candidate, not to win on speed.

benchmarks/pkb_way_vs_env.py also submits this file to pkb-env, with the import line below replaced by
`from pkb_env.runtime import load_inline` (the judge then builds the extension once and caches it).
"""
import torch
import torch.distributed as dist
from torch.utils.cpp_extension import load_inline

CPP_DECL = "torch::Tensor vec_copy(torch::Tensor x);"

CUDA_SRC = r"""
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// Copy nbytes from src to dst: 16-byte vectors for the bulk, single bytes for the tail.
// Both pointers must be 16-byte aligned (the launcher checks).
__global__ void pkb_vec_copy(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                             long long nbytes) {
    const long long n16 = nbytes >> 4;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* __restrict__ s = reinterpret_cast<const uint4*>(src);
    uint4* __restrict__ d = reinterpret_cast<uint4*>(dst);
    for (long long i = first; i < n16; i += stride) d[i] = s[i];
    for (long long i = (n16 << 4) + first; i < nbytes; i += stride) dst[i] = src[i];
}

torch::Tensor vec_copy(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "vec_copy: expected a CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    auto src = x.contiguous();
    auto out = torch::empty_like(src);  // src is contiguous, so out is too
    const long long nbytes = (long long)src.numel() * (long long)src.element_size();
    if (nbytes == 0) return out;
    const auto a = reinterpret_cast<uintptr_t>(src.data_ptr());
    const auto b = reinterpret_cast<uintptr_t>(out.data_ptr());
    if ((a | b) & 15) {  // a view at an odd offset: not worth a second kernel here
        out.copy_(src);
        return out;
    }
    const int threads = 256;
    long long blocks = ((nbytes >> 4) + threads - 1) / threads;
    if (blocks < 1) blocks = 1;
    if (blocks > 1056) blocks = 1056;  // 8 blocks per SM on a 132-SM H100/H200; the loop strides
    auto stream = c10::cuda::getCurrentCUDAStream();
    pkb_vec_copy<<<(unsigned int)blocks, threads, 0, stream.stream()>>>(
        static_cast<const unsigned char*>(src.data_ptr()), static_cast<unsigned char*>(out.data_ptr()), nbytes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="pkb_vec_copy_ext", cpp_sources=CPP_DECL, cuda_sources=CUDA_SRC,
                   functions=["vec_copy"], extra_cuda_cflags=["-O3"])


def solution(tensor: torch.Tensor) -> torch.Tensor:
    if dist.get_world_size() == 1:
        return _ext.vec_copy(tensor)  # the sum over one rank is the input itself: return a copy
    # World size > 1: no custom kernel here; NCCL on a clone (correct, and as fast as the reference).
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
