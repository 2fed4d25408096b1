"""One build of a candidate's kernels, inside a build cell: the hands of the judge's compile service.

A cell of kind "build" (cell.py) forks this process, so it runs in that cell's namespaces and allowlisted
root (the toolchain is there; the judge's home, caches and secrets are not), in a private tmpfs as its
working directory, under resource limits (CPU time, address space, file size, open files, processes),
as the candidate uid, without capabilities and unable to regain any. It reads one job from its channel,
runs the compiler (runtime/toolchain.py), answers with the bytes (a cubin, a shared object) or the
compiler's messages, and exits; the judge (judge/compiler.py) then ends the cell and with it everything
the build started, and decides alone what reaches its cache and the candidate.

Job: {"kind": "nvrtc" | "nvcc", "source", "options", "arch"} or {"kind": "extension", "name",
"cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags"}.
Answer: {"event": "built", "ok": true} + the bytes, or {"event": "built", "ok": false, "log": "..."}.
"""
from __future__ import annotations

from multiprocessing.connection import Connection
from pathlib import Path

from pkb_env.wire import channel


def serve(spec: dict, fd: int) -> None:
    """Read one job, build it, answer (the cell has contained this process already: forking.run_child)."""
    conn = Connection(fd)
    job, _ = channel.recv(conn)
    try:
        payload = build(job, spec["workdir"])
    except Exception as exc:  # noqa: BLE001  (a compiler's error, or whatever a build's initialiser raised)
        channel.send(conn, {"event": "built", "ok": False, "log": str(exc) or type(exc).__name__})
    else:
        channel.send(conn, {"event": "built", "ok": True}, payload)


def build(job: dict, directory: str) -> bytes:
    from pkb_env.runtime import toolchain

    kind = job["kind"]
    if kind == "nvrtc":
        return toolchain.nvrtc(job["source"], job["options"], job["arch"])
    if kind == "nvcc":
        return toolchain.nvcc(job["source"], job["options"], job["arch"], directory)
    if kind == "extension":
        _, path = toolchain.extension(job["name"], job["cpp_sources"], job["cuda_sources"], job["functions"],
                                      job["extra_cflags"], job["extra_cuda_cflags"], directory)
        return Path(path).read_bytes()
    raise ValueError(f"unknown build kind {kind!r}")
