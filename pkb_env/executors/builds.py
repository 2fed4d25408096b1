"""One build of a candidate's kernels in a build cell of its own: the judge's side (the process is sandbox/builder.py).

The cell is contained like a rank set's (namespaces, the allowlisted root with the toolchain, a private
tmpfs as the build's directory); the build runs as the candidate uid under the config's build limits and a
wall-clock deadline; then the cell ends, with everything the build started. What comes back is bytes or
the compiler's messages, unfiltered: the compile service (judge/compiler.py) filters them.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Callable

from pkb_env.config import JudgeConfig
from pkb_env.sandbox.containment import Containment
from pkb_env.sandbox.limits import ResourceLimits, describe_status
from pkb_env.sandbox.zygote import Zygote
from pkb_env.wire import channel
from pkb_env.wire.services import BuildRequest

BUILD_SIGNALS = {"SIGXCPU": "its CPU-time limit", "SIGKILL": "out of memory or a limit",
                 "SIGXFSZ": "a file over its size limit", "SIGSEGV": "a crash of the compiler or of the build's code"}


STOPPED = "the build was stopped: its judge is closing"


@dataclass(frozen=True)
class BuildOutcome:
    """What a build cell returned: the bytes, or the compiler's messages (unfiltered: the judge filters)."""

    ok: bool
    payload: bytes | None
    log: str
    workdir: str   # the build's directory, as it appears in the compiler's messages
    contained: bool
    answered: bool = False   # the build cell ran the compiler to its end and answered (not stopped, not lost)


@dataclass(frozen=True)
class BuildCell:
    """What a build needs from its executor: where to fork, as whom, with what environment."""

    zygote: Callable[[], Zygote]
    containment: Containment
    root: str                      # the executor's directory (the build's goes below it)
    uid: int | None                # the candidate uid, or None to keep the judge's (without capabilities)
    env: dict[str, str]            # the ranks' scrubbed environment
    config: JudgeConfig
    warn: Callable[[bool, dict[str, str]], None]   # told once whether the cell was contained
    sweep: Callable[[], None]      # after an uncontained build: kill what it left behind
    stopped: Callable[[], bool] = lambda: False   # the executor was interrupted (its judge closing): stop waiting


def build(where: BuildCell, job: BuildRequest, timeout: float) -> BuildOutcome:
    """Run one build job (sandbox/builder.py) in a fresh build cell, `timeout` seconds at most."""
    config = where.config
    limits = ResourceLimits(file_size_bytes=config.build_file_bytes, open_files=1024,
                            address_space_bytes=config.build_memory_bytes, cpu_seconds=config.build_cpu_seconds)
    workdir = tempfile.mkdtemp(prefix="pkb-build-", dir=where.root)
    owner = (where.uid, where.uid) if where.uid is not None else (os.geteuid(), os.getegid())
    os.chown(workdir, *owner)
    cell = where.zygote().cell(workdir, where.containment, kind="build", owner=owner)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        where.warn(cell.contained, cell.isolation)
        env = {**where.env, "HOME": workdir, "TMPDIR": workdir, "TORCH_EXTENSIONS_DIR": workdir,
               "MAX_JOBS": str(min(4, os.cpu_count() or 1))}
        spec = {"role": "build", "workdir": workdir, "env": env, "limits": asdict(limits), "uid": where.uid,
                "max_processes": config.build_processes}
        pid = cell.spawn(spec, theirs.fileno())
        theirs.close()
        conn = Connection(os.dup(ours.fileno()))
        try:
            channel.send(conn, job.message())
            header, payload = channel.recv(conn, time.monotonic() + timeout, config.max_build_bytes, where.stopped)
        except channel.ChannelStopped:   # not waited for: a compile can outlast a closing judge's patience by minutes
            return BuildOutcome(False, None, STOPPED, workdir, cell.contained)
        except channel.ChannelTimeout:
            return BuildOutcome(False, None, f"the build took longer than {timeout:.0f} s and was stopped",
                                workdir, cell.contained)
        except (channel.ChannelClosed, OSError):
            status = describe_status(cell.status_of(pid, wait=2.0))
            why = next((f" ({text})" for name, text in BUILD_SIGNALS.items() if status.endswith(name)), "")
            return BuildOutcome(False, None, f"the build process {status}{why}", workdir, cell.contained)
        except channel.ChannelError as exc:
            return BuildOutcome(False, None, f"the build answered unreadably ({exc})", workdir, cell.contained)
        finally:
            conn.close()
        if header.get("event") != "built" or (header.get("ok") and not payload):
            return BuildOutcome(False, None, "the build answered out of protocol", workdir, cell.contained)
        return BuildOutcome(bool(header.get("ok")), payload if header.get("ok") else None,
                            str(header.get("log", "")), workdir, cell.contained, answered=True)
    finally:
        theirs.close()
        ours.close()
        cell.close()
        if not cell.contained:
            where.sweep()
        shutil.rmtree(workdir, ignore_errors=True)
