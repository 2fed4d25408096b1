"""Repeatability of the judge's times: one kernel in several fresh processes, and the reference against itself.

    python benchmarks/repeatability.py --executor cuda --processes 5 --self-steps 20 --out $OUT
    python benchmarks/repeatability.py --executor cpu --world-size 2 --presets tiny --processes 3 \\
        --candidate solutions/examples/all_reduce_ring.py --self-steps 10 --out .out

Each of `--processes` fresh Python processes makes its own env (its own zygote, rank sets and reference
timing; only the calibration, which no time depends on, is measured once and shared), then judges, per preset, the reference
submitted as a candidate and `--candidate` (default: the expert all_reduce), once each. The first
process also submits the reference `--self-steps` times at the first preset (the reference against its
own cached time).
Reported per preset: each kernel's time per call across processes (max/min) and the speedups of the
reference against itself. Writes `repeatability.json` under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cuda")
    parser.add_argument("--world-size", type=int, default=None, help="default: every GPU (cuda), 2 (cpu)")
    parser.add_argument("--task", default="all_reduce")
    parser.add_argument("--presets", nargs="+", default=["bench", "large"])
    parser.add_argument("--candidate", default=str(ROOT / "solutions" / "experts" / "all_reduce.py"))
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--self-steps", type=int, default=20)
    parser.add_argument("--out", default=os.environ.get("OUT", ".out"))
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.world_size is None:
        if args.executor == "cuda":
            import torch

            args.world_size = torch.cuda.device_count()
        else:
            args.world_size = 2
    if args.child is not None:
        print(json.dumps(child(args)))
        return 0

    runs = []
    cache = tempfile.mkdtemp(prefix="pkb-repeat-")  # the calibration (not a time) is shared: measured once
    for index in range(args.processes):
        started = time.time()
        cmd = [sys.executable, __file__, "--child", str(index), "--executor", args.executor, "--world-size",
               str(args.world_size), "--task", args.task, "--candidate", args.candidate, "--self-steps",
               str(args.self_steps), "--presets", *args.presets]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "PKB_ENV_CACHE": cache})
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
            return 1
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"process {index}: {time.time() - started:.1f} s", file=sys.stderr)

    summary = {}
    for preset in args.presets:
        row = {}
        for kind in ("reference", "candidate", "reference_cached"):
            times = [r[preset][f"{kind}_us"] for r in runs]
            row[kind] = {"us": times, "max_over_min": max(times) / min(times)}
        selfs = runs[0][preset]["self_speedups"]
        row["self_speedups"] = {"values": selfs, "min": min(selfs), "max": max(selfs)} if selfs else None
        for kind in ("candidate_speedup", "candidate_cached_speedup"):
            values = [r[preset][kind] for r in runs]
            row[kind] = {"values": values, "max_over_min": max(values) / min(values)}
        summary[preset] = row
        print(f"{preset}: reference {_fmt(row['reference'])}; candidate {_fmt(row['candidate'])}; cached reference "
              f"{_fmt(row['reference_cached'])}" + (f"; reference against itself {min(selfs):.3f}-{max(selfs):.3f}x "
                                                    f"over {len(selfs)} steps" if selfs else "")
              + f"; candidate's paired speedup {min(row['candidate_speedup']['values']):.3f}-"
                f"{max(row['candidate_speedup']['values']):.3f}x (cached: "
                f"{min(row['candidate_cached_speedup']['values']):.3f}-{max(row['candidate_cached_speedup']['values']):.3f}x)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "repeatability.json").write_text(json.dumps({"args": vars(args), "summary": summary, "runs": runs},
                                                       indent=1))
    return 0


def _fmt(row: dict) -> str:
    return f"{min(row['us']):.1f}-{max(row['us']):.1f} us (max/min {row['max_over_min']:.3f})"


def child(args) -> dict:
    from pkb_env import JudgeConfig, JudgeService

    result = {}
    candidate = Path(args.candidate).read_text()
    for preset in args.presets:
        config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=preset)
        with JudgeService(config) as judge:
            session = judge.open(args.task)
            steps = {}
            for name, code in (("reference", session.reference), ("candidate", candidate)):
                record = session.judge(code)
                if not record.correct:
                    raise SystemExit(f"{name} at {preset}: {record.feedback}")
                steps[name] = record
            selfs = []
            if args.child == 0 and preset == args.presets[0]:
                selfs = [session.judge(session.reference).speedup for _ in range(args.self_steps)]
            t = steps["reference"].timing
            result[preset] = {"reference_us": t.time_s * 1e6, "reference_cached_us": t.cached_reference_s * 1e6,
                              "candidate_us": steps["candidate"].timing.time_s * 1e6,
                              "candidate_speedup": steps["candidate"].speedup,
                              "candidate_cached_speedup": t.cached_reference_s / steps["candidate"].timing.time_s,
                              "candidate_rse": steps["candidate"].timing.rse, "reference_rse": t.rse,
                              "self_speedups": selfs}
    return result


if __name__ == "__main__":
    sys.exit(main())
