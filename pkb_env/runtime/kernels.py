"""Compiling and launching CUDA kernels from candidate code.

`compile_cuda` turns CUDA C++ source into a loaded module (`compile_cubin`: just the cubin's bytes).
Inside a judged rank the request goes to the judge's compile service (judge/compiler.py): it checks the
options and includes, builds once per distinct source, options and architecture in a contained build
cell (NVRTC, or nvcc with backend="nvcc"), caches the cubin and hands the bytes to every rank: all ranks
of a step share one compile, and later steps reuse it. Outside the judge (debugging a candidate by
hand) the same compilers run in your process (runtime/toolchain.py). This module never imports the judge.

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

from pkb_env.runtime import link, toolchain
from pkb_env.runtime.toolchain import CompileError
from pkb_env.wire.requests import RequestError
from pkb_env.wire.services import Compile, LoadInline


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
    """CuPy's view of a torch stream, made once per stream (making one costs host time a call should not pay)."""
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
    """A compiled module, from compile_cubin's bytes: an ELF cubin. PTX text or a fatbin is refused: the
    driver would compile it here, past the judge's compile service and its checks (docs/containment.md)."""

    def __init__(self, cubin: bytes):
        if not isinstance(cubin, (bytes, bytearray)) or not bytes(cubin[:4]) == b"\x7fELF":
            raise TypeError("CudaModule takes a cubin from compile_cubin (an ELF image), not PTX text or a "
                            "fatbin: compile the source with compile_cuda or compile_cubin")
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


def compile_cubin(source: str, options: Sequence[str] = (), backend: str = "nvrtc", arch: str | None = None) -> bytes:
    """Compile CUDA C++ to a cubin for `arch` (e.g. "90"; default: this process's GPU) and return its bytes."""
    if backend not in ("nvrtc", "nvcc"):
        raise ValueError(f"backend must be 'nvrtc' or 'nvcc', got {backend!r}")
    if arch is None:
        import torch

        arch = "%d%d" % torch.cuda.get_device_capability()
    options = list(options)
    if link.attached():
        header, payload = link.request(_made(Compile, source, str(arch), tuple(options), backend))
        if not header.get("ok"):
            raise CompileError(header.get("error", "compile failed"))
        return payload
    if backend == "nvrtc":
        return toolchain.nvrtc(source, options, str(arch))
    with tempfile.TemporaryDirectory(prefix="pkb-nvcc-") as directory:
        return toolchain.nvcc(source, options, str(arch), directory)


def compile_cuda(source: str, options: Sequence[str] = (), backend: str = "nvrtc") -> CudaModule:
    """Compile CUDA C++ (kernels declared `extern "C" __global__`) for this GPU and load it."""
    return CudaModule(compile_cubin(source, options, backend))


def load_inline(name: str, cpp_sources: str | Sequence[str] = "", cuda_sources: str | Sequence[str] = "",
                functions: Sequence[str] | None = None, extra_cuda_cflags: Sequence[str] = (),
                extra_cflags: Sequence[str] = ()) -> Any:
    """torch.utils.cpp_extension.load_inline, built once by the judge's compile service (not once per rank).

    In a judged rank the extension is built in a contained build cell and cached by the judge; the rank
    receives the shared object's bytes and imports it here, in its own cell.
    """
    if not link.attached():
        directory = tempfile.mkdtemp(prefix="pkb-extension-")
        return toolchain.extension(name, _as_list(cpp_sources), _as_list(cuda_sources),
                                   list(functions) if functions else None, list(extra_cflags),
                                   list(extra_cuda_cflags), directory)[0]
    header, payload = link.request(extension_request(name, cpp_sources, cuda_sources, functions, extra_cuda_cflags,
                                                     extra_cflags))
    if not header.get("ok"):
        raise CompileError(header.get("error", "build failed"))
    path = os.path.join(tempfile.mkdtemp(), f"{name}.so")
    with open(path, "wb") as f:
        f.write(payload)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def extension_request(name: str, cpp_sources: str | Sequence[str] = "", cuda_sources: str | Sequence[str] = "",
                      functions: Sequence[str] | None = None, extra_cuda_cflags: Sequence[str] = (),
                      extra_cflags: Sequence[str] = ()) -> LoadInline:
    """What `load_inline` asks the judge's compile service for (CompileError where the service would refuse a
    value): a build made ahead of a step from the same request (benchmarks/pkb_corpus.py's prebuild) is the one
    the step finds in the judge's cache."""
    return _made(LoadInline, name, tuple(_as_list(cpp_sources)), tuple(_as_list(cuda_sources)),
                 tuple(functions) if functions else None, tuple(extra_cflags), tuple(extra_cuda_cflags))


def _made(request: type, *fields: Any) -> Any:
    """A request to the judge's compile service, checked as it is made (wire/services.py): a value it would
    refuse is a CompileError here, in the words it would use."""
    try:
        return request(*fields)
    except RequestError as exc:
        raise CompileError(str(exc)) from None


def _as_list(sources: str | Sequence[str]) -> list[str]:
    """One source or several; "" (the default) is none, so that a C++-only extension is built without CUDA."""
    if isinstance(sources, str):
        return [sources] if sources else []
    return list(sources)

