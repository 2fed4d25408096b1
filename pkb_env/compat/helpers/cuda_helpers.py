"""PKB's `utils.cuda_helpers.compile_cuda_extension`, built by pkb-env's compile service.

PKB's helper wraps `torch.utils.cpp_extension.load_inline(name, cpp_sources="", cuda_sources=cuda_src,
extra_cuda_cflags=["-O3", *extra_cuda_cflags], with_cuda=True)`: one CUDA source that holds its own
`PYBIND11_MODULE`, built by every rank into its own cache, for sm_90 unless TORCH_CUDA_ARCH_LIST says otherwise.
Here the same build runs once per distinct source in the judge's contained build cell, for this GPU, and every
rank imports the result (pkb_env.runtime.load_inline): the options are checked as for any candidate
(docs/containment.md); include paths and linker flags of the file's choosing are not available.
"""
from __future__ import annotations

from pkb_env.runtime import CompileError, load_inline


def compile_cuda_extension(name: str, cuda_src: str, extra_cuda_cflags: list[str] | None = None,
                           extra_include_paths: list[str] | None = None, extra_ldflags: list[str] | None = None):
    """JIT-compile a CUDA extension from `cuda_src` (with its own PYBIND11_MODULE) and return the loaded module."""
    if extra_include_paths:
        raise CompileError(f"compile_cuda_extension({name!r}): extra_include_paths {list(extra_include_paths)} are "
                           f"not available in pkb-env (builds see the CUDA toolkit's and torch's headers only; "
                           f"ThunderKittens is not installed): include only those headers")
    if extra_ldflags:
        raise CompileError(f"compile_cuda_extension({name!r}): extra_ldflags {list(extra_ldflags)} are not available "
                           f"in pkb-env (an extension links torch and the CUDA runtime only)")
    return load_inline(name, cpp_sources="", cuda_sources=cuda_src, extra_cuda_cflags=cflags(extra_cuda_cflags))


def cflags(extra_cuda_cflags: list[str] | None) -> list[str]:
    """PKB's flags: -O3, then the file's own."""
    return ["-O3", *(extra_cuda_cflags or [])]
