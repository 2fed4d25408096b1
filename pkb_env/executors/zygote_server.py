"""The zygote's server side: import torch once, plan the cells' root, then fork a cell per generation or build.

Started by `pkb_env.executors.zygote.Zygote` with a scrubbed environment; see that module for why.
Arguments: the channel's file descriptor, then JSON with the judge's home and cache directories (which
the allowlisted root must never show; the scrubbed environment names neither).
Ranks and builds are not forked here but by their cell (cell.py), inside the cell's namespaces.
"""
from __future__ import annotations

import json
import sys
from multiprocessing.connection import Connection

from pkb_env.executors import channel
from pkb_env.executors.forking import serve
from pkb_env.executors.limits import become_subreaper, set_parent_death_signal


def main() -> None:
    fd, judge = int(sys.argv[1]), json.loads(sys.argv[2])
    set_parent_death_signal()
    become_subreaper()  # orphans of un-namespaced cells (double forks, fork-walkers) become ours: the judge sweeps them
    import torch  # noqa: F401  (the point of the zygote: pay for this once)
    import torch.distributed  # noqa: F401

    from pkb_env.executors import builder, cell, rank, rootfs  # noqa: F401  (imported before any fork: inherited warm)

    cell.PLAN = rootfs.plan(home=judge["home"], cache=judge["cache"])  # once: every cell shows the same host paths
    conn = Connection(fd)
    channel.send(conn, {"event": "ready"})
    serve(conn, "cell", cell.run_cell)  # cells and ranks die with us: each sets PR_SET_PDEATHSIG
