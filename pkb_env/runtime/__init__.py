"""The kernel runtime candidate code may import: fast CUDA compiles and symmetric-memory helpers.

    from pkb_env.runtime import compile_cuda, symmetric_buffer, i32, i64, u64, f32, f64

    mod = compile_cuda(SRC)                       # NVRTC; compiled once per step for all ranks, cached
    kernel = mod.function("my_kernel")
    buf = symmetric_buffer((n,), torch.bfloat16)   # the same-shaped buffer on every rank, mapped everywhere
    buf.local.copy_(x); buf.barrier()              # publish, then wait for every rank
    kernel((blocks,), (threads,), buf.ptrs, out, i32(buf.rank), i32(buf.world_size), i64(n))
    buf.barrier()                                  # nobody may overwrite buffers a peer still reads

Compiles are done by the judge's compile service in a contained build cell (a candidate never writes the
shared kernel cache; options and includes are checked: docs/containment.md) when running inside pkb-env,
and in your own process otherwise. NVLink multicast is not available (NVLS is off on our machines).

CUDA source to concatenate into a kernel's own, e.g. `compile_cuda(SIGNAL_PAD_CUDA + REDUCE_CUDA + MY_KERNELS)`
(COPY_CUDA and REDUCE_CUDA are under include guards: given twice, or both, they define everything once):
    SIGNAL_PAD_CUDA  `pkb_block_barrier`: in-kernel barriers on the buffer's signal pads (signal_pads.py)
    COPY_CUDA        `vector_head`, `copy_span`: copies with 16-byte packs, any alignment (copy_cuda.py)
    REDUCE_CUDA      `Pack`, `to_f32`, `from_f32`, `reduce_span`, `PKB_FOR_WORLD_SIZE`: float32 sums of the
                     ranks' buffers in rank order (reduce_cuda.py; contains COPY_CUDA and the bf16/fp16 headers)
"""
from pkb_env.runtime.kernels import (CompileError, CudaModule, Kernel, compile_cubin, compile_cuda, f32, f64, i32,
                                     i64, load_inline, u64)
from pkb_env.runtime.copy_cuda import COPY_CUDA
from pkb_env.runtime.reduce_cuda import REDUCE_CUDA
from pkb_env.runtime.signal_pads import SIGNAL_PAD_CUDA
from pkb_env.runtime.symmetric import SymmetricBuffer, symmetric_buffer

__all__ = ["COPY_CUDA", "CompileError", "CudaModule", "Kernel", "REDUCE_CUDA", "SIGNAL_PAD_CUDA", "SymmetricBuffer",
           "compile_cubin", "compile_cuda", "f32", "f64", "i32", "i64", "load_inline", "symmetric_buffer", "u64"]
