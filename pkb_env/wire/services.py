"""What a rank may ask of the judge's compile service, and what the judge asks of a build cell: one typed request
per build, checked when it is made and again when it is read, as the judge's requests to ranks are (requests.py).

    rank (pkb_env.runtime)                  judge (judge/compiler.py)              build cell (sandbox/builder.py)
    Compile(source, arch, options, backend) -> checked, cached, else built     ->  the same request, options normalised
    LoadInline(name, sources, ...)          -> checked, cached, else built     ->  the same request, flags normalised
                                            <- reply {ok, error} + bytes       <- built {ok, log} + bytes

A rank's request crosses the rank's channel as an unasked `request` event (messages.UNASKED); candidate code
shares the rank's process and may write any frame there, so the judge reads every one back with this schema
(`parse_service`) before anything else, and answers one out of schema with an error, never a build. Its
values are checked where it is made too, in the words the judge would use (`ServiceRefused`: an architecture
"sm_90", an extension name that is no identifier), so honest code learns of a bad argument as it did when
the judge refused it. The compile service's own checks (options against an allowlist, includes, NVLink
multicast: judge/compile_checks.py) come after, in the judge, and the request it hands a build cell carries
the options they normalised.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from pkb_env.wire.requests import RequestError, from_fields

BACKENDS = ("nvrtc", "nvcc")


class ServiceRefused(RequestError):
    """A value the compile service refuses: the message names it and what is allowed (the rank's CompileError)."""


@dataclass(frozen=True)
class Service:
    kind: ClassVar[str] = ""

    def message(self) -> dict[str, Any]:
        """The frame's JSON header (tuples go as lists)."""
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Compile(Service):
    """CUDA C++ compiled to a cubin for the GPU architecture `arch` ("90") by `backend` (NVRTC or nvcc)."""

    kind: ClassVar[str] = "compile"
    source: str
    arch: str
    options: tuple[str, ...] = ()
    backend: str = "nvrtc"

    def __post_init__(self) -> None:
        _refuse(self.backend in BACKENDS, f"unknown compiler backend {self.backend!r}; use 'nvrtc' or 'nvcc'")
        _refuse(isinstance(self.arch, str) and self.arch.isdigit(), f"bad architecture {self.arch!r}: digits such "
                                                                    f"as '90'")
        _strings(self.options, f"{self.backend} options")
        _source("the CUDA source", self.source)


@dataclass(frozen=True)
class LoadInline(Service):
    """A torch extension (torch.utils.cpp_extension.load_inline) built to a shared object named `name`."""

    kind: ClassVar[str] = "load_inline"
    name: str
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...]
    functions: tuple[str, ...] | None = None
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _refuse(isinstance(self.name, str) and self.name.isidentifier() and len(self.name) <= 64,
                f"extension name {self.name!r} must be a Python identifier of at most 64 characters")
        _refuse(self.functions is None or all(isinstance(f, str) and f.isidentifier() for f in self.functions),
                f"functions must be a list of C++ identifiers, got {_shown(self.functions)!r}")
        for label, sources in (("cpp_sources", self.cpp_sources), ("cuda_sources", self.cuda_sources)):
            for i, source in enumerate(sources):
                _source(f"{label}[{i}]", source)
        _strings(self.extra_cflags, "host compiler options")
        _strings(self.extra_cuda_cflags, "nvcc options")


BuildRequest = Union[Compile, LoadInline]
SERVICES: dict[str, type[Service]] = {cls.kind: cls for cls in (Compile, LoadInline)}


def parse_service(message: Any) -> BuildRequest:
    """The request a frame carries (the rank's event header, or the judge's job for a build cell); RequestError
    for anything out of schema, ServiceRefused for a value refused."""
    if not isinstance(message, dict):
        raise RequestError("a service request that is not an object")
    cls = SERVICES.get(message.get("kind"))
    if cls is None:
        raise ServiceRefused(f"unknown request {message.get('kind')!r}")
    return from_fields(cls, {k: v for k, v in message.items() if k not in ("kind", "event", "payload")})


def _refuse(condition: bool, problem: str) -> None:
    if not condition:
        raise ServiceRefused(problem)


def _shown(values: Any) -> Any:
    """As the caller passed them (a list), for the message."""
    return list(values) if isinstance(values, tuple) else values


def _strings(values: Any, what: str) -> None:
    _refuse(isinstance(values, (list, tuple)) and all(isinstance(v, str) for v in values),
            f"{what} must be a list of strings, got {_shown(values)!r}")


def _source(label: str, source: Any) -> None:
    _refuse(isinstance(source, str), f"{label} must be a string of source code, got {type(source).__name__}")
