"""The compilers a rank can run by itself refuse NVLink multicast as the judge's compile service does.

A candidate may compile in its own rank instead of asking the judge (pkb_env.runtime.compile_cuda): CuPy's
RawKernel, RawModule(code=...), ElementwiseKernel and its NVRTC bindings (all through one function of
cupy_backends' nvrtc module), torch's `_compile_kernel` (NVRTC through ctypes, then a PTX load) and jiterator.
Text assembled at run time gets past the static screen; here those entry points are wrapped before any
candidate code exists (the zygote imports this module with the rank server, so every rank and build cell
forks with the wrappers in place) and refuse a source, header or PTX image that asks for multicast
(pkb_env/sources.py; C and PTX comments left out, as the compile service does). The tripwire watches the
wrappers: a candidate that puts an original back is caught after the call that did it. The originals are
kept only in the wrappers' closures (the screen refuses reading closures).

Not covered (docs/known_holes.md, "Code in a rank"): CuPy's nvcc backend and compilers run through
`subprocess`, torch.utils.cpp_extension in the rank, Triton's JIT, NVRTC reached through ctypes or
cuda-python, cubin and PTX images loaded through CuPy's Module or the driver.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterable

from pkb_env.ranks.tripwire import watch
from pkb_env.sources import MULTICAST_FIX, multicast_use, without_comments


class MulticastRefused(RuntimeError):
    """A source given to a compiler in the rank asks for NVLink multicast."""


def refuse_multicast(label: str, sources: Iterable[Any]) -> None:
    """Raise MulticastRefused for the first of `sources` (str, bytes, or lists of them) asking for multicast."""
    for source in sources:
        if isinstance(source, (list, tuple)):
            refuse_multicast(label, source)
            continue
        if isinstance(source, (bytes, bytearray)):
            source = bytes(source).decode("latin-1")
        if isinstance(source, str):
            found = multicast_use(without_comments(source))
            if found:
                raise MulticastRefused(f"{label}: {found[0]} refused (`{found[1]}`). {MULTICAST_FIX}.")


def _guard(owner: Any, name: str, label: str, sources: Callable[[tuple, dict], Iterable[Any]]) -> bool:
    """Replace owner.name by a function that checks `sources(args, kwargs)` first; False where there is none."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_pkb_guarded", False):
        return False

    def guarded(*args: Any, **kwargs: Any) -> Any:
        refuse_multicast(label, sources(args, kwargs))
        return original(*args, **kwargs)

    guarded._pkb_guarded = True   # not functools.wraps: its __wrapped__ would hand out the original
    guarded.__name__ = guarded.__qualname__ = name
    guarded.__doc__ = f"{name}, refusing sources that ask for NVLink multicast (pkb_env/ranks/compilers.py)."
    setattr(owner, name, guarded)
    watch(owner, name)
    return True


def _arg(index: int, keyword: str) -> Callable[[tuple, dict], list[Any]]:
    return lambda args, kwargs: [args[index] if len(args) > index else kwargs.get(keyword)]


def install() -> list[str]:
    """Wrap every in-rank compiler that is importable here; the names wrapped."""
    wrapped = []
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception:  # noqa: BLE001  (no CuPy, or a broken one: nothing of it to wrap)
        nvrtc = None
    if nvrtc is not None and _guard(nvrtc, "createProgram", "NVRTC (CuPy)",
                                    lambda a, k: [a[0] if a else k.get("src"), a[2] if len(a) > 2 else
                                                  k.get("headers", ())]):
        wrapped.append("cupy_backends.cuda.libs.nvrtc.createProgram")
    utils, jiterator = sys.modules.get("torch.cuda._utils"), sys.modules.get("torch.cuda.jiterator")
    for owner, name, label, sources in ((utils, "_nvrtc_compile", "NVRTC (torch)", _arg(0, "kernel_source")),
                                        (utils, "_cuda_load_module", "a PTX image (torch)", _arg(0, "ptx")),
                                        (jiterator, "_create_jit_fn", "jiterator", _arg(0, "code_string")),
                                        (jiterator, "_create_multi_output_jit_fn", "jiterator",
                                         _arg(0, "code_string"))):
        if owner is not None and _guard(owner, name, label, sources):
            wrapped.append(f"{owner.__name__}.{name}")
    return wrapped


WRAPPED = install()
