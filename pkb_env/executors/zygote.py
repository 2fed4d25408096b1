"""A fork server for rank processes: torch is imported once, each generation is a fork that costs milliseconds.

Starting a rank from scratch costs a torch import (1-1.5 s here, per rank); candidates must run in fresh
processes every step (docs/architecture.md, "Processes"), so the zygote imports torch and the rank code
once and forks on request: a cell per generation or per build (cell.py: its namespaces and allowlisted
root), which forks that generation's ranks or the build. The zygote is started with a scrubbed
environment (no secrets reach a fork, not even through /proc/self/environ) and without the working
directory on its `sys.path` (a cell must never depend on where the judge was started), never
initialises CUDA or a process group itself, and dies with the judge (PR_SET_PDEATHSIG). Each fork
server reaps its children and reports their exit status.

This module is the judge side (`Zygote`, `Cell`); the servers are zygote_server.py and cell.py.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle

from pkb_env.executors import channel


NAMESPACES_OFF = "off (PKB_ENV_NAMESPACES=0)"


@dataclass(frozen=True)
class Containment:
    """What each generation's cell must do: enter namespaces (where possible), and fail if it cannot."""

    namespaces: bool = True
    required: bool = False

    @classmethod
    def from_environment(cls) -> "Containment":
        """PKB_ENV_NAMESPACES=0 turns namespaces off; PKB_ENV_REQUIRE_CONTAINMENT=1 refuses to run without."""
        return cls(namespaces=os.environ.get("PKB_ENV_NAMESPACES", "1") != "0",
                   required=os.environ.get("PKB_ENV_REQUIRE_CONTAINMENT", "0") == "1")

    def missing(self) -> str | None:
        """None where a cell started now would get its namespaces, else why not (without starting one)."""
        from pkb_env.executors.namespaces import probe

        return probe() if self.namespaces else NAMESPACES_OFF


class ContainmentError(RuntimeError):
    """A cell could not set up the containment asked of it; the message names the step and the fix."""


def containment_advice(message: dict) -> str:
    """The fix for a cell's failure, by its cause: no advice that cannot apply (a root judge is root already)."""
    if message.get("cause") == "required":
        if os.environ.get("PKB_ENV_NAMESPACES", "1") == "0":
            return ("PKB_ENV_NAMESPACES=0 turns namespaces off while PKB_ENV_REQUIRE_CONTAINMENT=1 requires them: "
                    "unset one of the two")
        fix = ("allow unprivileged user namespaces (e.g. sysctl user.max_user_namespaces=15000, or on Ubuntu "
               "kernel.apparmor_restrict_unprivileged_userns=0) or run the judge as root"
               if not message.get("root") else "run the judge where it may create namespaces (a container "
               "started with CAP_SYS_ADMIN, e.g. docker --privileged, or outside one)")
        return f"{fix}; or, accepting weaker isolation, unset PKB_ENV_REQUIRE_CONTAINMENT"
    return ("this machine refused a step of building the cell (a pkb-env bug or an unusual mount setup: please "
            "report it with the message); to run anyway with the weaker fallback, set PKB_ENV_NAMESPACES=0")


class ForkServer:
    """The judge's end of a fork server's channel: ask for children, learn how they ended."""

    def __init__(self, conn: Connection, pid: int):
        self.conn = conn
        self.pid = pid
        self.exit_status: dict[int, int] = {}

    def fork(self, op: str, spec: dict, fd: int) -> int:
        """Ask for one child; `fd` (the child's end of its channel) is passed over, then closed here."""
        channel.send(self.conn, {"op": op, "spec": spec})
        send_handle(self.conn, fd, self.pid)
        while True:
            message, _ = channel.recv(self.conn, time.monotonic() + 30)
            if message.get("event") == "spawned":
                return int(message["pid"])
            self._note(message)

    def status_of(self, pid: int, wait: float = 0.0) -> int | None:
        """The raw wait status of a reaped child, waiting up to `wait` seconds for it."""
        deadline = time.monotonic() + wait
        while pid not in self.exit_status:
            try:
                message, _ = channel.recv(self.conn, deadline)
            except (channel.ChannelTimeout, channel.ChannelClosed, channel.ChannelError):
                return None  # no answer in time, or the server itself is gone
            self._note(message)
        return self.exit_status[pid]

    def drain(self) -> None:
        """Take in the exit reports waiting on the channel; a dead server has none to give."""
        try:
            while self.conn.poll(0):
                message, _ = channel.recv(self.conn, time.monotonic())
                self._note(message)
        except (OSError, EOFError, channel.ChannelClosed, channel.ChannelError):
            pass

    def _note(self, message: dict) -> None:
        if message.get("event") == "exited":
            self.exit_status[int(message["pid"])] = int(message["status"])


# `python -c` puts "" (the working directory) first on sys.path; the zygote drops it before importing anything.
BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p]; "
        "from pkb_env.executors.zygote_server import main; main()")


class Zygote(ForkServer):
    def __init__(self, env: dict[str, str], start_timeout: float = 120.0):
        from pkb_env.cache import cache_root

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        judge = json.dumps({"home": os.path.expanduser("~"), "cache": str(cache_root())})
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
        """Fork a cell for a generation (kind "ranks") or a build (kind "build") working in `workdir`.

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
            raise ContainmentError(f"the generation's cell did not start: {exc!r}") from None
        if message.get("event") != "ready":
            cell.close()
            raise ContainmentError(f"{message.get('message', message)}. Fix: {containment_advice(message)}")
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


class Cell(ForkServer):
    """One generation's fork server, inside that generation's namespaces (cell.py)."""

    def __init__(self, conn: Connection, pid: int, zygote: Zygote):
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
        """End the cell and with it every process of its generation; True when it is confirmed gone."""
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
