"""The zygote's server side: import torch once, then fork a rank per request and reap the children.

Started by `pkb_env.executors.zygote.Zygote` with a scrubbed environment; see that module for why.
"""
from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle

from pkb_env.executors import channel
from pkb_env.executors.isolation import enter_private_network
from pkb_env.executors.limits import become_subreaper, set_parent_death_signal


def serve(conn: Connection, network: str) -> None:
    from pkb_env.executors import rank  # imported before any fork: each fork inherits it warm

    channel.send(conn, {"event": "ready", "network": network})
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
        if message.get("op") == "spawn":
            fd = recv_handle(conn)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                conn.close()
                rank.run_forked(message["spec"], fd)  # never returns
            os.close(fd)
            channel.send(conn, {"event": "spawned", "pid": pid})


def _reap(conn: Connection) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel.send(conn, {"event": "exited", "pid": pid, "status": status})


def main() -> None:
    fd = int(sys.argv[1])
    set_parent_death_signal()
    become_subreaper()  # orphans of candidates (double forks, fork-walkers) become ours, so the judge can sweep them
    network = enter_private_network()  # before any rank exists: every fork inherits the namespace
    import torch  # noqa: F401  (the point of the zygote: pay for this once)
    import torch.distributed  # noqa: F401

    for module in sys.argv[2:]:
        __import__(module)
    serve(Connection(fd), network)  # ranks die with us: each set PR_SET_PDEATHSIG


if __name__ == "__main__":
    main()
