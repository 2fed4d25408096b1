"""A cell: the process that holds one rank set's (or one build's) namespaces and forks its processes.

Both ends live here: `Cell` is the judge's handle, `run_cell` the cell process. The zygote forks one cell per rank set of ranks and one per build of a candidate's kernels. The cell
enters new PID, mount and network namespaces (namespaces.py), builds the allowlisted root (rootfs.py:
only what the ranks need, read-only; private scratch space; the rank set's own directory), starts
the namespace's PID 1 (which mounts a fresh /proc and reaps orphans), pivots into the new root, then
serves `spawn` requests from the judge like the zygote serves `cell` requests: a rank (ranks/server.py) or a
build (builder.py), as the spec's role says. Ending the cell kills its PID 1, and the kernel then kills
everything in the namespace: no process survives it, however it forked, and nothing it wrote to /tmp or
/dev/shm either.

Where namespaces cannot be had (no root and no unprivileged user namespaces, or PKB_ENV_NAMESPACES=0),
the cell still forks its processes and, when it ends, kills its process tree; the executor's sweep
catches what escaped that. The cell says which in its ready message, and refuses to start when the
executor requires containment.
"""
from __future__ import annotations

import os
import signal
import time
from multiprocessing.connection import Connection
from typing import NoReturn

from pkb_env.sandbox import namespaces, rootfs
from pkb_env.sandbox.forking import ForkServer, run_child, serve
from pkb_env.sandbox.limits import become_subreaper, kill_tree, set_parent_death_signal
from pkb_env.sandbox.containment import NAMESPACES_OFF
from pkb_env.wire import channel

# Private scratch space per rank set, in memory (tmpfs), capped so that a candidate cannot fill the RAM
# with it: /dev/shm gets the most (NCCL's shared-memory transport lives there where GPUs lack P2P).
SCRATCH_CAPS = {"/tmp": (2 << 30, 8), "/var/tmp": (256 << 20, 32), "/dev/shm": (8 << 30, 4)}  # bytes, 1/x of RAM
BUILD_DIR_CAP = (4 << 30, 6)  # a build's own directory (a tmpfs: objects, the .so), bytes and 1/x of RAM
CONTAINED = {"pid": "private PID namespace (the rank set dies as one)",
             "network": "private network namespace (loopback only)"}
UNCONTAINED_FILES = "the host's (no mount namespace): candidates read and write whatever their uid may"
PLAN: rootfs.Plan | None = None  # what cells show of the host: set once by the zygote (zygote.main)


class Cell(ForkServer):
    """The judge's handle on one cell: the fork server of a rank set or a build, inside its namespaces."""

    def __init__(self, conn: Connection, pid: int, zygote: ForkServer):
        """`zygote`: the fork server that forked this cell, and reaps it (it knows the cell's exit status)."""
        super().__init__(conn, pid)
        self.zygote = zygote
        self.isolation: dict[str, str] = {}  # what was applied, in words
        self.contained = False                # in its own namespaces (ending it ends all it started)
        self.ending = False                   # told to end (`end`), not yet confirmed gone (`close`)

    def spawn(self, spec: dict, fd: int) -> int:
        return self.fork("spawn", spec, fd)

    def alive(self) -> bool:
        self.zygote.drain()
        return self.zygote.alive() and self.pid not in self.zygote.exit_status

    def end(self) -> None:
        """Tell the cell to end now, without waiting for it (`close` waits)."""
        if not self.ending:
            self.ending = True
            try:
                channel.send(self.conn, {"op": "exit"})
            except OSError:
                pass

    def close(self) -> bool:
        """End the cell and with it every process of its rank set; True when it is confirmed gone."""
        self.end()
        gone = self.zygote.status_of(self.pid, wait=3.0) is not None
        if not gone:
            try:
                os.kill(self.pid, signal.SIGKILL)  # its PID 1 and ranks die with it (PR_SET_PDEATHSIG)
            except OSError:
                pass
            gone = self.zygote.status_of(self.pid, wait=2.0) is not None
        self.conn.close()
        return gone


def run_cell(spec: dict, fd: int) -> NoReturn:
    """Entry point in the forked cell; never returns."""
    conn = Connection(fd)
    init = None
    try:
        set_parent_death_signal()
        become_subreaper()
        os.setsid()
        try:
            isolation, init = contain(spec, conn)
        except Exception as exc:  # noqa: BLE001  (any failure here is reported, then the cell ends)
            channel.send(conn, {"event": "failed", "cause": "setup", "root": os.geteuid() == 0,
                                "message": f"could not contain the {spec['kind']}: {exc!r}"})
            return_code = 1
        else:
            if spec["required"] and init is None:
                channel.send(conn, {"event": "failed", "cause": "required", "root": os.geteuid() == 0,
                                    "message": f"containment is required and namespaces are {isolation['pid']}"})
                return_code = 1
            else:
                channel.send(conn, {"event": "ready", "isolation": isolation, "contained": init is not None})
                serve(conn, "spawn", start)
                return_code = 0
    except BaseException:
        return_code = 70
    finally:
        end(init)
    os._exit(return_code)


def start(spec: dict, fd: int) -> NoReturn:
    """A process of the cell, by the spec's role: a build (builder.py) or, by default, a rank (ranks/server.py)."""
    from pkb_env.ranks import server  # already imported by the zygote: free
    from pkb_env.sandbox import builder

    if spec.get("role") == "build":  # the compilers' messages come back through the job's answer, not stdout
        run_child(spec, fd, os.devnull, spec["max_processes"], builder.serve)
    else:
        run_child(spec, fd, os.path.join(spec["workdir"], f"rank{spec['rank']}.log"), 1024, server.serve)


def contain(spec: dict, conn: Connection) -> tuple[dict[str, str], int | None]:
    """Enter the namespaces, build the root and start PID 1; returns what was applied and PID 1's pid."""
    if not spec["namespaces"]:
        return {"pid": NAMESPACES_OFF, "network": NAMESPACES_OFF, "filesystem": UNCONTAINED_FILES}, None
    user = os.geteuid() != 0
    try:
        namespaces.unshare(user=user)
    except OSError as exc:
        reason = f"unavailable ({exc})"
        return {"pid": reason, "network": reason, "filesystem": UNCONTAINED_FILES}, None
    # From here a failure leaves half-made namespaces: the cell fails rather than run anything in them.
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    scratch = [(path, min(cap, memory // share)) for path, (cap, share) in SCRATCH_CAPS.items()]
    private_dir = None
    if spec["kind"] == "build":
        private_dir = (min(BUILD_DIR_CAP[0], memory // BUILD_DIR_CAP[1]), *spec["owner"])
    root = rootfs.build(PLAN or rootfs.plan(), scratch, spec["workdir"], private_dir)
    namespaces.loopback_up()
    init = start_init(conn)
    rootfs.enter()
    isolation = {**CONTAINED, "filesystem": describe(root, spec["kind"]), "visible": ", ".join(root.bound)}
    if user:
        isolation["user"] = "user namespace (ids mapped to themselves)"
    return isolation, init


def describe(root: rootfs.Root, kind: str) -> str:
    """The filesystem line of `isolation()`: what the root holds, in words."""
    own = "the build's own directory (a private tmpfs)" if kind == "build" else "the rank set's directory"
    text = (f"allowlisted root (pivot_root): {len(root.bound)} host paths read-only (the Python install, pkb_env, "
            f"system libraries and binaries, the toolchain, CUDA and the driver, /sys), {len(root.etc)} public "
            f"files of /etc, /dev with {', '.join(root.devices)}; writable: {own} and private /tmp, /var/tmp, "
            f"/dev/shm; a fresh /proc; nothing else of the host (no home, no judge cache, no /etc/shadow, no "
            f"solution, test or doc of the project)")
    if root.hidden:
        text += f"; covered by an empty mount: {', '.join(root.hidden)}"
    if root.refused:
        text += f"; could not make read-only: {', '.join(root.refused[:5])}"
    return text


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
    """PID 1: reap whatever the rank set orphans, until the cell kills it (which ends the namespace)."""
    try:
        set_parent_death_signal()
        namespaces.mount_proc(at=rootfs.NEW + "/proc")  # the new root's /proc, mounted before the cell enters it
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
    """Kill the rank set: its PID 1 where there is one (the kernel does the rest), else the process tree."""
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
