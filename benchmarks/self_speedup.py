"""The reference judged against itself: the paired speedup a step reports beside the one its cached
reference time would give, per task, over several steps of one service.

    python benchmarks/self_speedup.py --executor cpu --world-size 4 --steps 3             # the eight primitives
    python benchmarks/self_speedup.py --executor cuda --world-size 1 --preset bench --tasks all_reduce --steps 20

Both figures come from the same steps: `paired` is the record's speedup (the median of the step's
candidate-burst / reference-replay ratios, docs/timing.md "Paired speedup"); `cached` is
cached_reference_s / time_s, what the reward used before (the reference timed once per task, earlier, in
another rank set). The ideal is 1.0 for both; the gap between their spreads is what pairing removes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

from tqdm import tqdm

from pkb_env import JudgeConfig, JudgeService
from pkb_env.tables import table
from pkb_env.task import load_task

PRIMITIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather", "scatter")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--tasks", nargs="+", default=list(PRIMITIVES))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset)
    rows, results = [], {}
    with JudgeService(config) as judge, tqdm(total=len(args.tasks) * args.steps, unit="step") as bar:
        for task in args.tasks:
            session, paired, cached, spreads = judge.open(task), [], [], []
            for _ in range(args.steps):
                record = session.judge(load_task(task).reference_source)
                t = record.timing
                paired.append(record.speedup)
                cached.append(t.cached_reference_s / t.time_s if t and t.cached_reference_s else None)
                spreads.append(t.speedup_spread if t else None)
                bar.update()
            results[task] = {"paired": paired, "cached": cached, "spread": spreads}
            good = [p for p in paired if p is not None]
            old = [c for c in cached if c is not None]
            rows.append([task, len(good), f"{min(good):.3f}-{max(good):.3f}" if good else "-",
                         f"{statistics.median(good):.3f}" if good else "-",
                         f"{min(old):.3f}-{max(old):.3f}" if old else "-",
                         f"{statistics.median([s for s in spreads if s is not None]):.3f}" if good else "-"])
    print(f"\nthe reference against itself, {args.executor} at world size {args.world_size}, {args.preset}, "
          f"{args.steps} steps per task")
    print(table(["task", "steps", "paired range", "paired median", "cached range", "pairs' spread"], rows))
    every = [p for r in results.values() for p in r["paired"]]
    old = [c for r in results.values() for c in r["cached"]]
    print(f"all steps: paired {min(p for p in every if p is not None):.3f}-{max(p for p in every if p is not None):.3f}"
          f" ({sum(p is None for p in every)} None), cached {min(old):.3f}-{max(old):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
