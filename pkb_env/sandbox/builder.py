"""One build of a candidate's kernels, inside a build cell: the hands of the judge's compile service.

A cell of kind "build" (cell.py) forks this process, so it runs in that cell's namespaces and allowlisted
root (the toolchain is there; the judge's home, caches and secrets are not), in a private tmpfs as its
working directory, under resource limits (CPU time, address space, file size, open files, processes),
as the candidate uid, without capabilities and unable to regain any. It reads one job from its channel,
runs the compiler (runtime/toolchain.py), answers with the bytes (a cubin, a shared object) or the
compiler's messages, and exits; the judge (judge/compiler.py) then ends the cell and with it everything
the build started, and decides alone what reaches its cache and the candidate.

Job: a `Compile` or `LoadInline` request (wire/services.py), read back with its schema; its options are
the ones the judge's checks let through.
Answer: {"event": "built", "ok": true} + the bytes, or {"event": "built", "ok": false, "log": "..."}.
"""
from __future__ import annotations

from multiprocessing.connection import Connection
from pathlib import Path

from pkb_env.wire import channel
from pkb_env.wire.services import BuildRequest, Compile, LoadInline, parse_service


def serve(spec: dict, fd: int) -> None:
    """Read one job, build it, answer (the cell has contained this process already: forking.run_child)."""
    conn = Connection(fd)
    message, _ = channel.recv(conn)
    try:
        payload = build(parse_service(message), spec["workdir"])
    except Exception as exc:  # noqa: BLE001  (a compiler's error, or whatever a build's initialiser raised)
        channel.send(conn, {"event": "built", "ok": False, "log": str(exc) or type(exc).__name__})
    else:
        channel.send(conn, {"event": "built", "ok": True}, payload)


def build(job: BuildRequest, directory: str) -> bytes:
    return BUILDS[type(job)](job, directory)


def _compile(job: Compile, directory: str) -> bytes:
    from pkb_env.runtime import toolchain

    if job.backend == "nvrtc":
        return toolchain.nvrtc(job.source, list(job.options), job.arch)
    return toolchain.nvcc(job.source, list(job.options), job.arch, directory)


def _extension(job: LoadInline, directory: str) -> bytes:
    from pkb_env.runtime import toolchain

    functions = None if job.functions is None else list(job.functions)
    _, path = toolchain.extension(job.name, list(job.cpp_sources), list(job.cuda_sources), functions,
                                  list(job.extra_cflags), list(job.extra_cuda_cflags), directory)
    return Path(path).read_bytes()


BUILDS = {Compile: _compile, LoadInline: _extension}
