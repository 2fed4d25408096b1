"""Fork servers (the zygote, each cell): both ends. The server forks a child per request and reports how its
children end; `ForkServer` is the judge's end of one.

Requests are `{"op": <op>, "spec": {...}}` followed by one file descriptor (the child's end of its own
channel); the answer is `{"event": "spawned", "pid": ...}`, and `{"event": "exited", "pid", "status"}`
comes for every child reaped, so the judge can say "rank 1 was killed by SIGSEGV".
"""
from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from typing import Callable, NoReturn

from pkb_env.wire import channel
from pkb_env.sandbox.privileges import drop_privileges
from pkb_env.sandbox.limits import ResourceLimits, become_subreaper, set_parent_death_signal


class ForkServer:
    """The judge's end of a fork server's channel: ask for children, learn how they ended."""

    def __init__(self, conn: Connection, pid: int):
        self.conn = conn
        self.pid = pid
        self.exit_status: dict[int, int] = {}

    def alive(self) -> bool:
        """The server itself is still running (each kind of server knows how to tell)."""
        raise NotImplementedError

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


def serve(conn: Connection, op: str, child: Callable[[dict, int], NoReturn]) -> str:
    """Answer `op` requests with forks running `child(spec, fd)` until told to exit ("exit") or the judge is gone
    ("closed": the channel's other end closed without a word)."""
    while True:
        _reap(conn)
        if not conn.poll(0.05):
            continue
        try:
            message, _ = channel.recv(conn, None)
        except channel.ChannelClosed:
            return "closed"
        if message.get("op") == "exit":
            return "exit"
        if message.get("op") == op:
            fd = recv_handle(conn)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                conn.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the zygote's own handler (zygote.py) is not theirs
                child(message["spec"], fd)  # never returns
            os.close(fd)
            channel.send(conn, {"event": "spawned", "pid": pid})


def run_child(spec: dict, fd: int, output: str, max_processes: int, body: Callable[[dict, int], None]) -> NoReturn:
    """The life of a forked child of a cell: contained first (`enter_child`), then `body(spec, fd)`; never
    returns. A failure anywhere exits 70 with its traceback in `output` (the judge sees the EOF and reads the
    log's tail)."""
    code = 0
    try:
        enter_child(spec, output, max_processes)
        body(spec, fd)
    except BaseException:
        traceback.print_exc()
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def enter_child(spec: dict, output: str, max_processes: int = 1024) -> None:
    """What every forked child of a cell does first, before any untrusted code: its own session, death with
    its parent, reaping its own orphans, its directory, stdout and stderr to `output` (a file of its
    directory, or os.devnull), the cell's environment and limits, and privileges dropped for good."""
    os.setsid()
    set_parent_death_signal()
    become_subreaper()
    os.chdir(spec["workdir"])
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(spec["env"])
    ResourceLimits(**spec["limits"]).apply()
    drop_privileges(spec.get("uid"), max_processes=max_processes)  # a uid change where possible, else no capabilities


def _reap(conn: Connection | None) -> None:
    """Collect every ended child, telling the judge how each ended (while there is a judge to tell)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if conn is not None:
            try:
                channel.send(conn, {"event": "exited", "pid": pid, "status": status})
            except OSError:
                conn = None
