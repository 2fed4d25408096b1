"""Step latency of the environment itself: the first step and warm steps, with a per-stage breakdown.

    python benchmarks/step_latency.py --executor cpu --task all_reduce --world-size 4 --steps 10
    python benchmarks/step_latency.py --executor cuda --world-size 2 --preset bench --steps 8 \
        --candidates reference solutions/experts/all_reduce.py --json step_latency.json

`--operations` adds where the judge's time went, per warm step, from the service's trace
(pkb_env/tracing.py): each request to the ranks (burst, fingerprints, the reference's replay, trials,
load), the comparison of fingerprints, waiting for a candidate's ranks (candidate ranks), waiting for
spares before a burst (settle, part of burst), ending the candidate's ranks (end, release) and moving the
spares on once the step's timed work is over (spares: a new candidate rank set's cell and processes made).

`open` starts the zygote (one torch import), pre-starts the reference and the spare candidate rank sets,
and measures a calibration unless one is cached. The first step pays for waiting on them (CUDA
contexts, communicators and their connections are made at a rank set's start) and the reference's
timing. Warm steps pay for whatever part of a spare's start the previous step did not hide, build,
trials, verification, timing and the check of every timed call. With several `--candidates`, each gets
its first step and `--steps` warm steps on the same service, in order. Columns are the record's stage
times (the candidate's), `reference` (the reference's part of the step) and the step's wall time.
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

from tqdm import tqdm

from pkb_env import JudgeConfig, JudgeService
from pkb_env.tables import table


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

    spent: dict[str, list[float]] = collections.defaultdict(list)
    trace = (lambda name, seconds: spent[name].append(seconds)) if args.operations else None
    start = time.perf_counter()
    judge = JudgeService(JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset),
                         trace=trace)
    made = time.perf_counter() - start
    runs = {}
    try:
        start = time.perf_counter()
        session = judge.open(args.task)
        reset_s = time.perf_counter() - start
        for name in args.candidates:
            action = session.reference if name == "reference" else open(name).read()
            steps = runs[name] = []
            for _ in tqdm(range(args.steps + 1), desc=os.path.basename(name), unit="step"):
                spent.clear()
                start = time.perf_counter()
                record = session.judge(action)
                total = time.perf_counter() - start
                timing, work = record.timing, record.reference
                steps.append({"total_s": total, "verdict": record.verdict.value, "speedup": record.speedup,
                              "call_s": timing.time_s if timing else None, "bursts": timing and timing.bursts,
                              "timed_calls": timing and timing.calls, "timing_wall_s": timing and timing.wall_s,
                              **{f"{k}_s": v for k, v in record.stage_seconds.items()},
                              "reference_s": work.trials_s + work.timing_s + work.replay_s if work else 0.0,
                              "operations": {k: [sum(v), len(v)] for k, v in spent.items()}})
        facts = judge.reference_facts()
    finally:
        judge.close()

    print(f"\n{args.task} {args.preset} world {args.world_size} on {args.executor}: make {made * 1e3:.0f} ms, "
          f"open {reset_s * 1e3:.0f} ms (starts the zygote, pre-starts the rank sets, calibrates unless cached)")
    print(f"rank start-up (reference rank set): {facts}\n")
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
            json.dump({"args": vars(args), "make_s": made, "open_s": reset_s, "rank_facts": facts, "runs": runs},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
