"""The zygote's server side: import torch once, then fork a cell per generation and reap the cells.

Started by `pkb_env.executors.zygote.Zygote` with a scrubbed environment; see that module for why.
Ranks are not forked here but by their generation's cell (cell.py), inside the cell's namespaces.
"""
from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from pkb_env.executors import channel
from pkb_env.executors.forking import serve
from pkb_env.executors.limits import become_subreaper, set_parent_death_signal


def main() -> None:
    fd = int(sys.argv[1])
    set_parent_death_signal()
    become_subreaper()  # orphans of un-namespaced cells (double forks, fork-walkers) become ours: the judge sweeps them
    import torch  # noqa: F401  (the point of the zygote: pay for this once)
    import torch.distributed  # noqa: F401

    from pkb_env.executors import cell, rank  # noqa: F401  (imported before any fork: every fork inherits them warm)

    for module in sys.argv[2:]:
        __import__(module)
    conn = Connection(fd)
    channel.send(conn, {"event": "ready"})
    serve(conn, "cell", cell.run_cell)  # cells and ranks die with us: each sets PR_SET_PDEATHSIG


if __name__ == "__main__":
    main()
