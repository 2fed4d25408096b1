"""A fork server for rank processes: torch is imported once, each rank is a fork that costs milliseconds.

Starting a rank from scratch costs a torch import (1-1.5 s here, per rank); candidates must run in fresh
processes every step (DESIGN §4), so the zygote imports torch and the rank code once and forks ranks on
request. It is started with a scrubbed environment (no secrets reach a fork, not even through
/proc/self/environ), never initialises CUDA or a process group itself, and dies with the judge
(PR_SET_PDEATHSIG). It reaps its children and reports their exit status, so the judge can say "rank 1
was killed by SIGSEGV".

This module is the judge side (`Zygote`); the server is `python -m pkb_env.executors.zygote_server FD`.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle

from pkb_env.executors import channel


class Zygote:
    """Judge-side handle of the fork server."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = (), start_timeout: float = 120.0):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd = [sys.executable, "-m", "pkb_env.executors.zygote_server", str(theirs.fileno()), *preload]
        self.process = subprocess.Popen(cmd, env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        theirs.close()
        self._sock = ours
        self.conn = Connection(os.dup(ours.fileno()))
        self.exit_status: dict[int, int] = {}
        message, _ = channel.recv(self.conn, time.monotonic() + start_timeout)
        if message.get("event") != "ready":
            raise RuntimeError(f"zygote failed to start: {message}")
        self.network: str = message.get("network", "unknown")

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, spec: dict, fd: int) -> int:
        """Fork one rank; `fd` (the rank's end of its channel) is passed over the socket, then closed here."""
        channel.send(self.conn, {"op": "spawn", "spec": spec})
        send_handle(self.conn, fd, self.process.pid)
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
                return None  # no answer in time, or the zygote itself is gone
            self._note(message)
        return self.exit_status[pid]

    def drain(self) -> None:
        """Take in the exit reports waiting on the channel; a dead zygote has none to give."""
        try:
            while self.conn.poll(0):
                message, _ = channel.recv(self.conn, time.monotonic())
                self._note(message)
        except (OSError, EOFError, channel.ChannelClosed, channel.ChannelError):
            pass

    def _note(self, message: dict) -> None:
        if message.get("event") == "exited":
            self.exit_status[int(message["pid"])] = int(message["status"])

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
