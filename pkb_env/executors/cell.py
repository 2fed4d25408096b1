"""A cell: the process that holds one generation's namespaces and forks that generation's ranks.

The zygote forks one cell per generation. The cell enters new PID, mount and network namespaces
(namespaces.py), makes the filesystem read-only but for the generation's directory and private
scratch space, starts the namespace's PID 1 (which mounts a fresh /proc and reaps orphans), then serves
`spawn` requests from the judge like the zygote serves `cell` requests. Ending the cell kills its PID 1,
and the kernel then kills everything in the namespace: no process of the generation survives it,
however it forked, and nothing it wrote to /tmp or /dev/shm either.

Where namespaces cannot be had (no root and no unprivileged user namespaces, or PKB_ENV_NAMESPACES=0),
the cell still forks the ranks and, when it ends, kills its process tree; the executor's sweep catches
what escaped that. The cell says which in its ready message, and refuses to start when the executor
requires containment.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import NoReturn

from pkb_env.executors import channel, namespaces
from pkb_env.executors.forking import serve
from pkb_env.executors.limits import become_subreaper, kill_tree, set_parent_death_signal
from pkb_env.executors.zygote import NAMESPACES_OFF

# Private scratch space per generation, in memory (tmpfs), capped so that a candidate cannot fill the RAM
# with it: /dev/shm gets the most (NCCL's shared-memory transport lives there where GPUs lack P2P).
SCRATCH_CAPS = {"/tmp": (2 << 30, 8), "/var/tmp": (256 << 20, 32), "/dev/shm": (8 << 30, 4)}  # bytes, 1/x of RAM
# Folders setup.py installs under the pkb_env name from elsewhere in the checkout (editable installs).
MAPPED_PACKAGES = ("tasks", "rewards", "agents", "configs")
CONTAINED = {"pid": "private PID namespace (the generation dies as one)",
             "network": "private network namespace (loopback only)"}


def run_cell(spec: dict, fd: int) -> NoReturn:
    """Entry point in the forked cell; never returns."""
    from pkb_env.executors import rank  # already imported by the zygote: free

    conn = Connection(fd)
    init = None
    try:
        set_parent_death_signal()
        become_subreaper()
        os.setsid()
        try:
            isolation, init = contain(spec, conn)
        except Exception as exc:  # noqa: BLE001  (any failure here is reported, then the cell ends)
            channel.send(conn, {"event": "failed", "message": f"could not contain the generation: {exc!r}"})
            return_code = 1
        else:
            if spec["required"] and init is None:
                channel.send(conn, {"event": "failed", "message": f"containment is required and {isolation['pid']}"})
                return_code = 1
            else:
                channel.send(conn, {"event": "ready", "isolation": isolation, "contained": init is not None})
                serve(conn, "spawn", rank.run_forked)
                return_code = 0
    except BaseException:
        return_code = 70
    finally:
        end(init)
    os._exit(return_code)


def contain(spec: dict, conn: Connection) -> tuple[dict[str, str], int | None]:
    """Enter the namespaces and start their PID 1; returns what was applied and PID 1's pid."""
    if not spec["namespaces"]:
        return {"pid": NAMESPACES_OFF, "filesystem": NAMESPACES_OFF, "network": NAMESPACES_OFF}, None
    user = os.geteuid() != 0
    try:
        namespaces.unshare(user=user)
    except OSError as exc:
        reason = f"unavailable ({exc})"
        return {"pid": reason, "filesystem": reason, "network": reason}, None
    # From here a failure leaves half-made namespaces: the cell fails rather than run candidates in them.
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    scratch = [(path, min(cap, memory // share)) for path, (cap, share) in SCRATCH_CAPS.items()]
    scratch.append((spec["root"], 64 << 20))
    refused = namespaces.private_filesystem(spec["workdir"], scratch, needed_paths())
    namespaces.loopback_up()
    init = start_init(conn)
    filesystem = "read-only except the generation's directory; private /tmp, /var/tmp, /dev/shm and /proc"
    if refused:
        filesystem += f"; could not make read-only: {', '.join(refused[:5])}"
    isolation = {**CONTAINED, "filesystem": filesystem}
    if user:
        isolation["user"] = "user namespace (ids mapped to themselves)"
    return isolation, init


def needed_paths() -> list[str]:
    """Where this Python and the judge's code live: ranks must still see them when /tmp is covered."""
    import importlib.util

    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             *sys.path]
    for name in ("pkb_env", *(f"pkb_env.{sub}" for sub in MAPPED_PACKAGES)):
        spec = importlib.util.find_spec(name)
        paths += list(spec.submodule_search_locations or []) if spec else []
    return paths


def start_init(conn: Connection) -> int:
    """Fork the namespace's PID 1; it mounts /proc and answers over a pipe before any rank exists."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        conn.close()
        init(write_end)
    os.close(write_end)
    answer = os.read(read_end, 4096)  # returns empty if PID 1 died before answering
    os.close(read_end)
    if answer != b"ok":
        os.waitpid(pid, 0)
        raise namespaces.NamespaceError(0, f"PID 1 of the namespace failed: {answer.decode(errors='replace') or 'died'}")
    return pid


def init(answer_fd: int) -> NoReturn:
    """PID 1: reap whatever the generation orphans, until the cell kills it (which ends the namespace)."""
    try:
        set_parent_death_signal()
        namespaces.mount_proc()
        os.write(answer_fd, b"ok")
    except BaseException as exc:
        os.write(answer_fd, str(exc).encode()[:4000] or b"error")
        os._exit(1)
    os.close(answer_fd)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.1)
        except OSError:
            pass


def end(init: int | None) -> None:
    """Kill the generation: its PID 1 where there is one (the kernel does the rest), else the process tree."""
    if init is not None:
        try:
            os.kill(init, signal.SIGKILL)
        except OSError:
            pass
    else:
        import psutil

        try:
            kill_tree([c.pid for c in psutil.Process().children()], timeout=1.0)
        except psutil.Error:
            pass
    deadline = time.monotonic() + 2.0
    while True:  # reap here: every rank's end is the cell's to collect
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
