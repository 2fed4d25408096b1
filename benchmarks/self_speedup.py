"""The reference judged against itself: the paired speedup a step reports beside the one its cached
reference time would give, per task, over several steps of one service.

    python benchmarks/self_speedup.py --executor cpu --world-size 4 --steps 3             # the eight primitives
    python benchmarks/self_speedup.py --executor cuda --world-size 1 --preset bench --tasks all_reduce --steps 20
    python benchmarks/self_speedup.py ... --protocol burst_s=0.004 budget_s=0.15   # the protocol's defaults changed
    python benchmarks/self_speedup.py --executor cuda --world-size 1 --preset bench --tasks all --steps 3 \
        --time-limit 300 --json self.json                  # every task that takes W=1, stopped between tasks at 300 s
    python benchmarks/self_speedup.py ... --json self.json --resume      # again: only the tasks self.json lacks

Both figures come from the same steps: `paired` is the record's speedup (the pseudo-median of the step's
candidate-burst / reference-replay ratios, docs/timing.md "Paired speedup"), `median` the plain median of
the same ratios (the record's `pair_ratios`: the estimator used until 2026-12-03); `cached` is
cached_reference_s / time_s, what the reward used before (the reference timed once per task, earlier, in
another rank set). The ideal is 1.0 for both; the gap between their spreads is what pairing removes. Each
step's wall time and pair count are printed too, so that a protocol's cost is read beside its spread.

`reward gap` is what issue 46 asks of the shipped reward (`--reward`, default the shaped reward): each step's
reward against the reward the same record earns at a speedup of exactly 1 (its speedup and interval set to 1, its
roofline fraction the one the step's own reference time gives), the largest gap over the task's steps, and how
many steps lie within 0.02 of it.

    python benchmarks/self_speedup.py --steps 10 --tasks fused_moe_fwd_lora quantized_grad_allreduce \
        rope_allgather fused_moe_fwd moe_post_all2all                  # five host-bound tasks, the reward's gap
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import fields, replace

from tqdm import tqdm

from pkb_env import JudgeConfig, JudgeService
from pkb_env.config import TimingProtocol
from pkb_env.errors import JudgeError
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import load_reward
from pkb_env.tables import table
from pkb_env.task import load_task, runnable_tasks

PRIMITIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather", "scatter")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--tasks", nargs="+", default=list(PRIMITIVES),
                        help="task names, or 'all': every task that takes the world size and preset")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--protocol", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="TimingProtocol fields changed from the clock's defaults, e.g. burst_s=0.004")
    parser.add_argument("--json", default=None, help="written after every task, so a run cut short keeps its tasks")
    parser.add_argument("--resume", action="store_true",
                        help="read --json back and judge only the tasks it does not hold (a judge error is tried "
                             "again); the table covers them all (one GPU call did not reach every task in 250 s)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="S",
                        help="start no task after S seconds (the table then says how many were left)")
    parser.add_argument("--reward", default="default", help="the reward whose gap to a speedup of exactly 1 is shown")
    args = parser.parse_args()
    reward = load_reward(args.reward)
    if args.tasks == ["all"]:
        args.tasks = runnable_tasks(args.world_size, args.preset)
    if args.resume and not args.json:
        parser.error("--resume reads the --json file of the run before: name it")
    results = _restored(args.json, args.tasks) if args.resume else {}

    config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset,
                         protocol_changes=_changes(args.protocol))
    started = time.monotonic()
    waiting = [task for task in args.tasks if task not in results]
    with JudgeService(config) as judge, tqdm(total=len(waiting) * args.steps, unit="step", disable=not sys.stderr.isatty()) as bar:
        for task in waiting:
            if args.time_limit is not None and time.monotonic() - started > args.time_limit:
                break
            session, paired, cached, spreads, walls, pairs, medians, gaps = judge.open(task), [], [], [], [], [], [], []
            source, failure = load_task(task).reference_source, None
            for _ in range(args.steps):
                begun = time.monotonic()
                try:
                    record = session.judge(source)
                except JudgeError as exc:   # the judge's own failure on this task: named, the other tasks go on
                    failure = str(exc)[:300]
                    bar.update(args.steps - len(walls))
                    break
                walls.append(time.monotonic() - begun)
                t = record.timing
                pairs.append(t.pairs if t else 0)
                paired.append(record.speedup)
                medians.append(statistics.median(t.pair_ratios) if t and t.pair_ratios else None)
                cached.append(t.cached_reference_s / t.time_s if t and t.cached_reference_s else None)
                spreads.append(t.speedup_spread if t else None)
                gaps.append(reward(record).value - reward(at_reference_speed(record)).value if record.speedup else None)
                bar.update()
            results[task] = {"judge_error": failure} if failure is not None else {
                "paired": paired, "median": medians, "cached": cached, "spread": spreads, "wall_s": walls,
                "pairs": pairs, "reward_gap": gaps}
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
    asked = {task: results[task] for task in args.tasks if task in results}   # this run's and restored ones
    print(f"\nthe reference against itself, {args.executor} at world size {args.world_size}, {args.preset}, "
          f"{args.steps} steps per task" + (f", protocol {' '.join(args.protocol)}" if args.protocol else "")
          + (f"; {len(args.tasks) - len(asked)} tasks not reached in {args.time_limit:.0f} s"
             if len(asked) < len(args.tasks) else ""))
    print(table(["task", "steps", "paired range", "paired median", "median-of-ratios range", "cached range",
                 "pairs' spread", "pairs", "warm step ms", "reward gap (steps within 0.02)"],
                [_row(task, result) for task, result in asked.items()]))
    timed = [r for r in asked.values() if "paired" in r]
    every = [p for r in timed for p in r["paired"] if p is not None]
    medians = [statistics.median(g) for g in ([p for p in r["paired"] if p is not None] for r in timed) if g]
    missing = sum(len(r["paired"]) for r in timed) - len(every)
    if every:
        print(f"all steps: paired {min(every):.3f}-{max(every):.3f} ({missing} None); tasks whose median is within [0.97, 1.03]: "
              f"{sum(0.97 <= m <= 1.03 for m in medians)} of {len(medians)}, within [0.9, 1.1]: "
              f"{sum(0.9 <= m <= 1.1 for m in medians)}; steps within [0.95, 1.05]: "
              f"{sum(0.95 <= p <= 1.05 for p in every)} of {len(every)}")
    return 0


def _restored(path: str, tasks: list[str]) -> dict[str, dict]:
    """What the run before wrote to `path` (nothing where it does not exist), less the judge errors of `tasks`
    (tried again: a judge fixed since, or a cause that has passed). Its other tasks are kept, so that the file,
    written again after every task, still holds them."""
    try:
        with open(path) as f:
            earlier = json.load(f)
    except FileNotFoundError:
        return {}
    return {task: result for task, result in earlier.items() if task not in tasks or "judge_error" not in result}


def _row(task: str, result: dict) -> list:
    """One task's line of the table, from its results (this run's or restored)."""
    if "judge_error" in result:
        return [task, 0, "judge error: " + result["judge_error"][:60], "-", "-", "-", "-", "-", "-", "-"]
    known = [abs(g) for g in result["reward_gap"] if g is not None]
    good = [p for p in result["paired"] if p is not None]
    plain = [m for m in result["median"] if m is not None]
    old = [c for c in result["cached"] if c is not None]
    spreads, pairs, walls = result["spread"], result["pairs"], result["wall_s"]
    return [task, len(good), f"{min(good):.3f}-{max(good):.3f}" if good else "-",
            f"{statistics.median(good):.3f}" if good else "-",
            f"{min(plain):.3f}-{max(plain):.3f}" if plain else "-",
            f"{min(old):.3f}-{max(old):.3f}" if old else "-",
            f"{statistics.median([s for s in spreads if s is not None]):.3f}" if good else "-",
            f"{statistics.median(pairs):.0f}", f"{1e3 * statistics.median(walls[1:] or walls):.0f}",
            f"{max(known):.3f} ({sum(g <= 0.02 for g in known)}/{len(known)})" if known else "-"]


def at_reference_speed(record: EvaluationRecord) -> EvaluationRecord:
    """`record` as if its code had taken exactly the reference's time in this step: speedup and interval 1, the
    roofline fraction of the step's own reference time (timing.reference_s = time_s x speedup)."""
    t = record.timing
    roofline = record.roofline and replace(record.roofline, fraction=record.roofline.bound_s / t.reference_s)
    return replace(record, timing=replace(t, speedup=1.0, speedup_low=1.0, speedup_high=1.0, time_s=t.reference_s),
                   roofline=roofline)


def _changes(changes: list[str]) -> tuple[tuple[str, object], ...]:
    """FIELD=VALUE changes to the clock's default protocol (floats, ints or strings as the field is)."""
    kinds = {f.name: float if getattr(TimingProtocol(), f.name) is None else type(getattr(TimingProtocol(), f.name))
             for f in fields(TimingProtocol)}
    updates = []
    for change in changes:
        name, _, value = change.partition("=")
        if name not in kinds:
            raise SystemExit(f"--protocol: unknown field {name!r}; TimingProtocol has {sorted(kinds)}")
        updates.append((name, kinds[name](value)))
    return tuple(updates)


if __name__ == "__main__":
    sys.exit(main())
