"""Every task's reference against its own roofline: time per call, the bound at calibrated and datasheet
peaks, the fraction of each, and the dominant term. A fraction above 1 is a bug of the cost model or of the
calibration (the bound is meant to be a lower bound on any code's time), and the script says so.

    python benchmarks/roofline_references.py --executor cuda --world-size 2 --presets bench large
    python benchmarks/roofline_references.py --executor cpu --world-size 4 --presets tiny      # CPU ranks

Writes $OUT/roofline_references.json (default ./.out) and prints a table; exits 1 if a fraction exceeds 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from pkb_env import JudgeConfig, JudgeService
from pkb_env.tables import table


def measure(judge: JudgeService, task: str) -> dict:
    session = judge.open(task)
    record = session.judge(session.reference)
    row = {"task": task, "preset": record.preset, "dtype": record.dtype, "world_size": record.world_size,
           "correct": record.correct, "feedback": record.feedback}
    if record.timing is None or record.roofline is None:
        return row
    r = record.roofline
    row.update(time_us=record.timing.time_s * 1e6, speedup=record.timing.speedup, suspect=record.timing.suspect,
               bound_us=r.bound.bound_s * 1e6, source=r.bound.source, dominant=r.bound.dominant,
               comm_us=r.bound.comm_s * 1e6, compute_us=r.bound.compute_s * 1e6, memory_us=r.bound.memory_s * 1e6,
               fraction=r.fraction, datasheet_bound_us=r.datasheet.bound_s * 1e6 if r.datasheet else None,
               spec_fraction=r.spec_fraction, busbw_gbps=r.busbw_gbps)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cuda")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--presets", nargs="+", default=["bench"])
    parser.add_argument("--tasks", nargs="+", default=None, help="default: every task that takes the world size")
    args = parser.parse_args()
    os.environ.setdefault("PKB_ENV_CACHE", tempfile.mkdtemp(prefix="pkb-roofline-"))
    out = Path(os.environ.get("OUT", ".out"))
    out.mkdir(parents=True, exist_ok=True)

    rows = []
    for preset in args.presets:
        with JudgeService(JudgeConfig(executor=args.executor, world_size=args.world_size, preset=preset)) as judge:
            rows += [measure(judge, task) for task in args.tasks or judge.tasks()]
            calibration = judge.calibration()
    headers = ["task", "preset", "time us", "bound us", "dominant", "fraction", "datasheet us", "spec fraction"]
    print(table(headers, [[r["task"], r["preset"], r.get("time_us"), r.get("bound_us"), r.get("dominant"),
                           r.get("fraction"), r.get("datasheet_bound_us"), r.get("spec_fraction")] for r in rows]))
    print(f"\ncalibration: {calibration}")
    (out / "roofline_references.json").write_text(json.dumps(
        {"args": vars(args), "calibration": vars(calibration) if calibration else None, "rows": rows}, indent=1))
    bad = [r for r in rows if not r["correct"] or (r.get("fraction") or 0) > 1 or (r.get("spec_fraction") or 0) > 1]
    for r in bad:
        print(f"\nPROBLEM {r['task']} {r['preset']}: {r['feedback']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
