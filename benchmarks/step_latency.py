"""Step latency of the environment itself: the first step and warm steps, with a per-stage breakdown.

    python benchmarks/step_latency.py --executor cpu --task all_reduce --world-size 4 --steps 10
    python benchmarks/step_latency.py --executor cuda --world-size 2 --preset bench --steps 8 \
        --candidates reference agents/experts/all_reduce.py --json step_latency.json

`--operations` adds where the judge's time went, per warm step: each request to the ranks (bursts,
fingerprints, the reference's replay, trials, loads), the comparison of fingerprints, waiting for a
generation (wait_ready; `settle` is the part of it spent waiting for spares before bursts) and ending one
(retire and release, which start the next spares) (the judge's functions wrapped with a timer in this
process).

`reset` starts the zygote (one torch import) and pre-starts the reference and the spare candidate
generations. The first step pays for waiting on them (CUDA contexts, communicators and their
connections are made at generation start), a calibration (unless cached) and the reference's timing.
Warm steps pay for whatever part of a spare's start the previous step did not hide, build, trials,
verification, timing and the check of every timed call. With several `--candidates`, each gets its
first step and `--steps` warm steps in the same env, in order.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager

import gymnasium
from tqdm import tqdm

import pkb_env  # noqa: F401
from pkb_env.report import table


@contextmanager
def timed_operations(spent: dict[str, list[float]]):
    """Wrap the judge's requests to the ranks and its own checks with timers; `spent[name]` gets seconds."""
    from pkb_env.executors import operations, process
    from pkb_env.executors.generation import Generation
    from pkb_env.judge import pipeline

    targets = [(operations, name) for name in ("burst", "fingerprints", "replay", "trials", "load")]
    targets += [(pipeline, "compare_burst"), (Generation, "wait_ready"), (process.ProcessExecutor, "settle"),
                (process.ProcessExecutor, "retire"), (process.ProcessExecutor, "release")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in targets]

    def timer(name, fn):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name].append(time.perf_counter() - start)
        return run

    for owner, name, fn in saved:
        setattr(owner, name, timer(name, fn))
    try:
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--task", default="all_reduce")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=10, help="warm steps after the first")
    parser.add_argument("--candidates", nargs="+", default=["reference"],
                        help="files to submit, or 'reference' (default)")
    parser.add_argument("--json", default=None, help="write the measurements here")
    parser.add_argument("--operations", action="store_true", help="also time the judge's operations per step")
    args = parser.parse_args()
    os.environ.setdefault("PKB_ENV_CACHE", tempfile.mkdtemp(prefix="pkb-bench-cache-"))  # cold calibration

    start = time.perf_counter()
    # One episode holds every step of every candidate; an unreachable target keeps it from terminating.
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task=args.task, world_size=args.world_size,
                         executor=args.executor, preset=args.preset,
                         max_turns=(args.steps + 1) * len(args.candidates), target_speedup=float("inf"))
    made = time.perf_counter() - start
    start = time.perf_counter()
    obs, _ = env.reset(seed=0)
    reset_s = time.perf_counter() - start
    runs = {}
    try:
        for name in args.candidates:
            action = obs["reference"] if name == "reference" else open(name).read()
            steps = runs[name] = []
            for _ in tqdm(range(args.steps + 1), desc=os.path.basename(name), unit="step"):
                spent: dict[str, list[float]] = collections.defaultdict(list)
                start = time.perf_counter()
                if args.operations:
                    with timed_operations(spent):
                        _, _, _, _, info = env.step(action)
                else:
                    _, _, _, _, info = env.step(action)
                total = time.perf_counter() - start
                timing = info["record"].timing
                steps.append({"total_s": total, "verdict": info["verdict"], "speedup": info["speedup"],
                              "call_s": timing.time_s if timing else None, "bursts": timing and timing.bursts,
                              "timed_calls": timing and timing.calls, "timing_wall_s": timing and timing.wall_s,
                              **{f"{k}_s": v for k, v in info["stage_seconds"].items()},
                              "operations": {k: [sum(v), len(v)] for k, v in spent.items()}})
        facts = env.unwrapped.executor._reference.facts if env.unwrapped.executor._reference else []
    finally:
        env.close()

    print(f"\n{args.task} {args.preset} world {args.world_size} on {args.executor}: make {made * 1e3:.0f} ms, "
          f"reset {reset_s * 1e3:.0f} ms (starts the zygote and pre-starts the generations)")
    print(f"rank start-up (reference generation): {facts}\n")
    first = True
    for name, steps in runs.items():
        stages = [k for k in steps[0] if k.endswith("_s") and k not in ("total_s", "call_s", "timing_wall_s")]
        rows = [["first step" if first else "first of candidate", *(steps[0][k] * 1e3 for k in stages),
                 steps[0]["total_s"] * 1e3]]
        first = False
        if steps[1:]:
            rows.append(["warm median", *(statistics.median(s[k] for s in steps[1:]) * 1e3 for k in stages),
                         statistics.median(s["total_s"] for s in steps[1:]) * 1e3])
        print(os.path.basename(name))
        print(table(["ms", *(k[:-2] for k in stages), "total"], rows))
        if args.operations and steps[1:]:
            names = sorted({k for s in steps[1:] for k in s["operations"]},
                           key=lambda k: -statistics.median(s["operations"].get(k, [0, 0])[0] for s in steps[1:]))
            print(table(["operation (warm steps)", "ms per step (median)", "requests per step (median)"],
                        [[k, statistics.median(s["operations"].get(k, [0, 0])[0] for s in steps[1:]) * 1e3,
                          statistics.median(s["operations"].get(k, [0, 0])[1] for s in steps[1:])] for k in names]))
        medians = [s["call_s"] for s in steps if s["call_s"]]
        speedups = [s["speedup"] for s in steps if s["speedup"]]
        if medians:
            print(f"time per call over {len(medians)} steps: {min(medians) * 1e6:.1f}-{max(medians) * 1e6:.1f} us "
                  f"(max/min {max(medians) / min(medians):.3f}); speedup {min(speedups):.3f}-{max(speedups):.3f}x; "
                  f"verdicts {sorted({s['verdict'] for s in steps})}\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "make_s": made, "reset_s": reset_s, "rank_facts": facts, "runs": runs},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
