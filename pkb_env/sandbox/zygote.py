"""The zygote: a fork server that imports torch once, so that each rank set or build is a fork (milliseconds).

Starting a rank from scratch costs a torch import, far more than a fork (docs/measurements/2026-12-02-fork-cost-cpu.md);
candidates must run in fresh
processes every step (docs/architecture.md, "Processes"), so the zygote imports torch and the rank code
once and forks on request: a cell per rank set or per build (cell.py: its namespaces and allowlisted
root), which forks that rank set's ranks or the build. The zygote is started with a scrubbed
environment (variables.py: no secrets reach a fork, not even through /proc/self/environ) and without the
working directory on its `sys.path` (a cell must never depend on where the judge was started), never
initialises CUDA or a process group itself, and dies with the judge (PR_SET_PDEATHSIG). Each fork server
reaps its children and reports their exit status.

Both ends live here: `Zygote` is the judge's handle, `main` the zygote process.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from multiprocessing.connection import Connection

from pkb_env.sandbox.cell import Cell
from pkb_env.sandbox.containment import Containment, ContainmentError, containment_advice
from pkb_env.sandbox.forking import ForkServer, serve
from pkb_env.sandbox.limits import become_subreaper, kill_tree, set_parent_death_signal
from pkb_env.wire import channel


# `python -c` puts "" (the working directory) first on sys.path; the zygote drops it before importing anything.
BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p]; "
        "from pkb_env.sandbox.zygote import main; main()")


class Zygote(ForkServer):
    def __init__(self, env: dict[str, str], start_timeout: float, cache: str, root: str, gpu: bool = False):
        """Start the zygote with `env` (the scrubbed environment); `cache` is the judge's cache directory,
        which no cell may show; `root` the executor's directory, which the zygote removes if the judge dies
        without closing it (`main`); `gpu`: its ranks are GPU ones (what they may import is imported first)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        judge = json.dumps({"home": os.path.expanduser("~"), "cache": cache, "root": root, "gpu": gpu,
                            "parent": os.getpid()})
        cmd = [sys.executable, "-c", BOOT, str(theirs.fileno()), judge]
        self.process = subprocess.Popen(cmd, env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        theirs.close()
        self._sock = ours
        super().__init__(Connection(os.dup(ours.fileno())), self.process.pid)
        message, _ = channel.recv(self.conn, time.monotonic() + start_timeout)
        if message.get("event") != "ready":
            raise RuntimeError(f"zygote failed to start: {message}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def cell(self, workdir: str, containment: Containment, kind: str = "ranks", owner: tuple[int, int] | None = None,
             timeout: float = 30.0) -> "Cell":
        """Fork a cell for a rank set (kind "ranks") or a build (kind "build") working in `workdir`.

        A contained build gets a private tmpfs at `workdir` owned by `owner` (uid, gid) instead of the host's
        directory: nothing it writes reaches the host. Waits until the cell is contained.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            spec = {"workdir": workdir, "kind": kind, "owner": owner or (os.geteuid(), os.getegid()),
                    **asdict(containment)}
            pid = self.fork("cell", spec, theirs.fileno())
        finally:
            theirs.close()
        cell = Cell(Connection(os.dup(ours.fileno())), pid, self)
        ours.close()
        try:
            message, _ = channel.recv(cell.conn, time.monotonic() + timeout)
        except (channel.ChannelTimeout, channel.ChannelClosed, channel.ChannelError) as exc:
            cell.close()
            raise ContainmentError(f"the rank set's cell did not start: {exc!r}") from None
        if message.get("event") != "ready":
            cell.close()
            raise ContainmentError(f"{message.get('message', message)}. Fix: {containment_advice(message, containment)}")
        cell.isolation = message["isolation"]
        cell.contained = message["contained"]
        return cell

    def close(self) -> None:
        try:
            channel.send(self.conn, {"op": "exit"})
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.conn.close()
        self._sock.close()


def main() -> None:
    """The zygote process itself (started by `Zygote` through BOOT): arguments are the channel's file
    descriptor, then JSON with the judge's home and cache directories (which the allowlisted root must
    never show; the scrubbed environment names neither)."""
    fd, judge = int(sys.argv[1]), json.loads(sys.argv[2])
    # A judge killed outright (SIGKILL, OOM) cannot clean up: the zygote, told by SIGTERM as its parent dies,
    # ends every cell and removes the executor's directory, so a dead judge leaves nothing in /tmp either.
    signal.signal(signal.SIGTERM, lambda *_: _orphaned(judge["root"]))
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != judge["parent"]:   # the judge died before the signal was asked for: none will come
        _orphaned(judge["root"])
    become_subreaper()  # orphans of un-namespaced cells (double forks, fork-walkers) become ours: the judge sweeps them
    import torch  # noqa: F401  (the point of the zygote: pay for this once)
    import torch.distributed  # noqa: F401
    if judge.get("gpu"):
        # torch's first symmetric allocation imports this (hundreds of modules, sympy's among them, compiled from
        # source where no .pyc can be written): seconds in every fresh rank, milliseconds once it is imported here
        # (benchmarks/symmetric_setup_cost.py; docs/measurements/2026-12-02-symmetric-memory-and-throughput-h200.md).
        # Pure Python: no CUDA is touched. CPU ranks have no symmetric memory: their zygote skips it (0.6-0.7 s of
        # its ~3.3 s start on the 2-core machine, paid by every judge that starts).
        import torch.fx.experimental.symbolic_shapes  # noqa: F401
        _import_cupy()

    from pkb_env.ranks import server  # noqa: F401  (imported before any fork: inherited warm)
    from pkb_env.sandbox import builder, cell, rootfs  # noqa: F401

    cell.PLAN = rootfs.plan(home=judge["home"], cache=judge["cache"])  # once: every cell shows the same host paths
    conn = Connection(fd)
    channel.send(conn, {"event": "ready"})
    if serve(conn, "cell", cell.run_cell) != "exit":   # cells and ranks die with us: each sets PR_SET_PDEATHSIG
        _orphaned(judge["root"])   # the judge is gone without a word: clean up as its death signal would have us
    # Told to exit: nothing is left to tear down, and the interpreter's own teardown with torch loaded took 0.8 s
    # of every judge's close on the 2-core machine.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _import_cupy() -> None:
    """CuPy, through which the runtime loads and launches a candidate's compiled kernels (pkb_env/runtime/
    kernels.py): imported in every fresh rank it cost a candidate's first kernel part of its trials
    (docs/measurements/2026-12-03-timing-h200.md, "Symmetric memory set up in the start, CuPy imported before the
    fork"). Its import touches
    no CUDA (the ranks forked after it make their own contexts). Where it is missing or broken the ranks
    import it themselves, and say why there."""
    try:
        import cupy  # noqa: F401
    except Exception:  # noqa: BLE001  (optional: a rank that needs it raises its own error)
        pass


def _orphaned(root: str) -> None:
    """The judge died: kill every process under us (cells, their ranks, adopted strays), then remove the
    executor's directory; exit. Ranks die with their cells anyway (PR_SET_PDEATHSIG); killing them first
    keeps them from writing into the directory while it goes."""
    import psutil

    try:
        kill_tree([c.pid for c in psutil.Process().children(recursive=True)], timeout=2.0)
    except psutil.Error:
        pass
    for _ in range(20):
        shutil.rmtree(root, ignore_errors=True)
        if not os.path.exists(root):
            break
        time.sleep(0.05)
    os._exit(0)
