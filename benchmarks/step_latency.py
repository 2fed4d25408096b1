"""Step latency of the environment itself: the first step and warm steps, with a per-stage breakdown.

    python benchmarks/step_latency.py --executor cpu --task all_reduce --world-size 4 --steps 10

The first step pays for the zygote (one torch import), the first rank generation, the reference
generation, a calibration (unless cached) and the reference timing. Warm steps pay for one candidate
generation (pre-started during the previous step), build, trials, verification and timing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import gymnasium
from tqdm import tqdm

import pkb_env  # noqa: F401
from pkb_env.report import table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--task", default="all_reduce")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=10, help="warm steps after the first")
    parser.add_argument("--candidate", default=None, help="a file to submit (default: the reference)")
    parser.add_argument("--json", default=None, help="write the measurements here")
    args = parser.parse_args()
    os.environ.setdefault("PKB_ENV_CACHE", tempfile.mkdtemp(prefix="pkb-bench-cache-"))  # cold calibration

    start = time.perf_counter()
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task=args.task, world_size=args.world_size,
                         executor=args.executor, preset=args.preset, max_turns=args.steps + 1)
    made = time.perf_counter() - start
    start = time.perf_counter()
    obs, _ = env.reset(seed=0)
    reset_s = time.perf_counter() - start
    action = open(args.candidate).read() if args.candidate else obs["reference"]
    steps = []
    try:
        for i in tqdm(range(args.steps + 1), desc="steps", unit="step"):
            start = time.perf_counter()
            _, _, _, _, info = env.step(action)
            total = time.perf_counter() - start
            steps.append({"total_s": total, "verdict": info["verdict"], "speedup": info["speedup"],
                          "call_s": info["record"].timing.time_s if info["record"].timing else None,
                          **{f"{k}_s": v for k, v in info["stage_seconds"].items()}})
    finally:
        env.close()

    stages = [k for k in steps[0] if k.endswith("_s") and k not in ("total_s", "call_s")]
    warm = steps[1:]
    rows = [["first step", *(steps[0][k] * 1e3 for k in stages), steps[0]["total_s"] * 1e3]]
    if warm:
        rows.append(["warm median", *(statistics.median(s[k] for s in warm) * 1e3 for k in stages),
                     statistics.median(s["total_s"] for s in warm) * 1e3])
    print(f"\n{args.task} {args.preset} world {args.world_size} on {args.executor}: make {made * 1e3:.0f} ms, "
          f"reset {reset_s * 1e3:.0f} ms (starts the zygote and the first generation)\n")
    print(table(["ms", *(k[:-2] for k in stages), "total"], rows))
    medians = [s["call_s"] for s in steps if s["call_s"]]
    speedups = [s["speedup"] for s in steps if s["speedup"]]
    if medians:
        print(f"\ncandidate time per call (the executor's statistic) over {len(medians)} steps: min {min(medians) * 1e3:.3f} ms, "
              f"max {max(medians) * 1e3:.3f} ms (max/min {max(medians) / min(medians):.2f}); "
              f"speedup min {min(speedups):.2f}x max {max(speedups):.2f}x; verdicts {sorted({s['verdict'] for s in steps})}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "make_s": made, "reset_s": reset_s, "steps": steps}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
