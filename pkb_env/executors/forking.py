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
