"""Compiling and launching CUDA kernels from candidate code.

`compile_cuda` turns CUDA C++ source into a loaded module. Inside a judged rank the judge compiles it
(NVRTC, or nvcc with backend="nvcc") once per distinct source, options and architecture, caches the cubin
in its own directory and hands the bytes to every rank: all ranks of a step share one compile, and later
steps reuse it. Outside the judge (debugging a candidate by hand) CuPy compiles locally.

Kernels launch on torch's current stream by default, so they order with the torch ops around them.
Arguments: torch tensors (passed as device pointers), and scalars wrapped with i32/i64/u64/f32/f64 so that
their C type is explicit (a bare Python int or float is ambiguous: the kernel reads the bytes it declares).
"""
from __future__ import annotations

import importlib.util
import os
import tempfile
from typing import Any, Sequence

import numpy as np

from pkb_env.judge.compiler import CompileError
from pkb_env.runtime import link


def i32(value: int) -> np.int32:
    return np.int32(value)


def i64(value: int) -> np.int64:
    return np.int64(value)


def u64(value: int) -> np.uint64:
    """A raw 64-bit address (e.g. SymmetricBuffer.ptrs_address)."""
    return np.uint64(value)


def f32(value: float) -> np.float32:
    return np.float32(value)


def f64(value: float) -> np.float64:
    return np.float64(value)


class Kernel:
    def __init__(self, function: Any, name: str):
        self._function = function
        self.name = name

    def __call__(self, grid: Sequence[int] | int, block: Sequence[int] | int, *args: Any,
                 shared_mem: int = 0, stream: Any = None) -> None:
        import torch

        grid = (grid,) if isinstance(grid, int) else tuple(grid)
        block = (block,) if isinstance(block, int) else tuple(block)
        torch_stream = stream if stream is not None else torch.cuda.current_stream()
        converted = tuple(_argument(a) for a in args)
        self._function(grid, block, converted, shared_mem=shared_mem, stream=_cupy_stream(torch_stream.cuda_stream))


_streams: dict[int, Any] = {}


def _cupy_stream(handle: int) -> Any:
    """CuPy's view of a torch stream, made once per stream (making one costs ~24 us of host time)."""
    if handle not in _streams:
        import warnings

        import cupy

        with warnings.catch_warnings():  # CuPy 14 prefers Stream.from_external(obj with __cuda_stream__)
            warnings.simplefilter("ignore", DeprecationWarning)
            _streams[handle] = cupy.cuda.ExternalStream(handle)
    return _streams[handle]


def _argument(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        if not value.is_cuda:
            raise TypeError("kernel arguments must be CUDA tensors; got a CPU tensor")
        return np.uint64(value.data_ptr())
    if isinstance(value, bool) or (isinstance(value, int) and not isinstance(value, np.integer)):
        raise TypeError(f"pass Python ints through i32()/i64()/u64() so their C type is explicit (got {value!r})")
    if isinstance(value, float) and not isinstance(value, np.floating):
        raise TypeError(f"pass Python floats through f32() or f64(), matching the kernel's float or double "
                        f"parameter (got {value!r})")
    return value


class CudaModule:
    def __init__(self, cubin: bytes):
        import cupy

        fd, path = tempfile.mkstemp(suffix=".cubin")
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        self._module = cupy.RawModule(path=path)
        self._functions: dict[str, Kernel] = {}

    def function(self, name: str) -> Kernel:
        if name not in self._functions:
            self._functions[name] = Kernel(self._module.get_function(name), name)
        return self._functions[name]


def compile_cuda(source: str, options: Sequence[str] = (), backend: str = "nvrtc") -> CudaModule:
    """Compile CUDA C++ (kernels declared `extern "C" __global__`) for this GPU and load it."""
    if backend not in ("nvrtc", "nvcc"):
        raise ValueError(f"backend must be 'nvrtc' or 'nvcc', got {backend!r}")
    import torch

    major, minor = torch.cuda.get_device_capability()
    body = {"source": source, "options": list(options), "backend": backend, "arch": f"{major}{minor}"}
    if link.attached():
        header, payload = link.request("compile", body)
        if not header.get("ok"):
            raise CompileError(header.get("error", "compile failed"))
        return CudaModule(payload)
    from pkb_env.judge.compiler import compile_to_cubin  # outside the judge: compile here

    return CudaModule(compile_to_cubin(**body))


def load_inline(name: str, cpp_sources: str | Sequence[str] = "", cuda_sources: str | Sequence[str] = "",
                functions: Sequence[str] | None = None, extra_cuda_cflags: Sequence[str] = (),
                extra_cflags: Sequence[str] = ()) -> Any:
    """torch.utils.cpp_extension.load_inline, built once by the judge (not once per rank) and cached."""
    body = {"name": name, "cpp_sources": _as_list(cpp_sources), "cuda_sources": _as_list(cuda_sources),
            "functions": list(functions) if functions else None, "extra_cuda_cflags": list(extra_cuda_cflags),
            "extra_cflags": list(extra_cflags)}
    if link.attached():
        header, payload = link.request("load_inline", body)
        if not header.get("ok"):
            raise CompileError(header.get("error", "build failed"))
        path = os.path.join(tempfile.mkdtemp(), f"{name}.so")
        with open(path, "wb") as f:
            f.write(payload)
    else:
        from pkb_env.judge.compiler import build_extension

        path = build_extension(**body)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _as_list(sources: str | Sequence[str]) -> list[str]:
    return [sources] if isinstance(sources, str) else list(sources)

