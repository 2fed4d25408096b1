"""What the zygote saves: a rank process forked from it against a fresh interpreter that imports torch.

    python benchmarks/fork_cost.py [--repeats 10] [--world-size 2]

Three figures, each over `--repeats` fresh tries, printed as median and range:
* `python -c "import torch, torch.distributed"`: what a rank started from scratch pays before any work;
* a cell forked from the zygote (its namespaces and allowlisted root made, where the machine allows them);
* a whole CPU rank set started from the zygote (cell, rank forks, process group) until every rank is ready.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from pkb_env import JudgeConfig
from pkb_env.executors import make_executor
from pkb_env.executors.rank_set import RankSet
from pkb_env.tables import table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()

    imports = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, torch.distributed"], check=True)
        imports.append(time.perf_counter() - start)

    executor = make_executor(JudgeConfig(executor="cpu", world_size=args.world_size))
    cells, rank_sets = [], []
    try:
        zygote = executor.zygote  # started once, as in any judge: not part of the figures below
        for _ in range(args.repeats):
            workdir = tempfile.mkdtemp(dir=executor.root)
            start = time.perf_counter()
            cell = zygote.cell(workdir, executor.containment)
            cells.append(time.perf_counter() - start)
            cell.close()
            start = time.perf_counter()
            ranks = RankSet(zygote, executor.placement, executor.config, executor.env, "probe", executor.root,
                            uid=executor.candidate_uid, containment=executor.containment)
            ranks.wait_ready()
            rank_sets.append(time.perf_counter() - start)
            ranks.close()
        contained = executor.namespaces_missing is None
    finally:
        executor.close()

    def row(name, values):
        return [name, statistics.median(values) * 1e3, min(values) * 1e3, max(values) * 1e3]

    print(f"{args.repeats} tries each; cells {'with' if contained else 'without'} namespaces\n")
    print(table(["what", "median ms", "min ms", "max ms"], [
        row("fresh interpreter importing torch", imports), row("cell forked from the zygote", cells),
        row(f"CPU rank set of {args.world_size}, forked, until ready", rank_sets)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
