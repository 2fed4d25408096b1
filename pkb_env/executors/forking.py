"""The loop every fork server runs (the zygote, each cell): fork a child per request, report how children end.

Requests are `{"op": <op>, "spec": {...}}` followed by one file descriptor (the child's end of its own
channel); the answer is `{"event": "spawned", "pid": ...}`, and `{"event": "exited", "pid", "status"}`
comes for every child reaped, so the judge can say "rank 1 was killed by SIGSEGV".
"""
from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle
from typing import Callable, NoReturn

from pkb_env.executors import channel
from pkb_env.executors.isolation import drop_privileges
from pkb_env.executors.limits import ResourceLimits, become_subreaper, set_parent_death_signal


def serve(conn: Connection, op: str, child: Callable[[dict, int], NoReturn]) -> None:
    """Answer `op` requests with forks running `child(spec, fd)` until told to exit or the judge is gone."""
    while True:
        _reap(conn)
        if not conn.poll(0.05):
            continue
        try:
            message, _ = channel.recv(conn, None)
        except channel.ChannelClosed:
            return
        if message.get("op") == "exit":
            return
        if message.get("op") == op:
            fd = recv_handle(conn)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                conn.close()
                child(message["spec"], fd)  # never returns
            os.close(fd)
            channel.send(conn, {"event": "spawned", "pid": pid})


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
