"""PKB's own 87 reference files, judged unchanged as PKB-format candidates (docs/pkb_compat.md).

    python benchmarks/pkb_references.py PKB_CHECKOUT [--world-size 4] [--executor cpu] [--only 1,2,31] [--json F]

PKB_CHECKOUT: a ParallelKernelBench clone or git directory (its files are read with git, never copied here). Each
`reference/<N>_<name>.py` at PKB's HEAD maps to its task (pkb_env/compat/files.py) and is judged with
JudgeConfig(pkb=True): PKB's signature, outputs and helpers, through the task's mapping or on the task's PKB
variant. Every task where pkb-env computes PKB's function should be correct; the others are listed with the
reason (the mapping's `differs`, what PKB's file needs, or the judge's message).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pkb_env import JudgeConfig
from pkb_env.client import LocalClient
from pkb_env.compat.checkout import Checkout
from pkb_env.compat.files import classify
from pkb_env.tables import table
from pkb_env.task import load_task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a ParallelKernelBench clone or git directory")
    parser.add_argument("--rev", default="HEAD", help="PKB's commit to read reference/ at (default HEAD)")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--dtype", default=None,
                        help="the run's dtype (PKB's corpus: bfloat16); default each preset's own")
    parser.add_argument("--only", default=None, help="comma-separated PKB ids")
    parser.add_argument("--json", type=Path, default=None, help="write one record per file here (JSON lines)")
    args = parser.parse_args()

    checkout = Checkout(args.checkout)
    only = {int(i) for i in args.only.split(",")} if args.only else None
    files = [f for f in (classify(Path(p)) for p in checkout.files(args.rev, "reference"))
             if f.number is not None and (only is None or f.number in only)]
    files.sort(key=lambda f: f.number)
    config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset, dtype=args.dtype,
                         pkb=True)
    rows, out = [], args.json.open("w") if args.json else None
    with LocalClient(config) as client:
        for f in files:
            if f.task is None:
                rows.append([f.number, f.path.stem, "-", "-", "no task", f.why])
                continue
            source = checkout.read(args.rev, str(f.path))
            started = time.perf_counter()
            record = client.submit(f.task, source).result()
            seconds = time.perf_counter() - started
            rows.append([f.number, f.path.stem, f.task, record.pkb.statement if record.pkb else "-",
                         record.verdict.value, reason(record, load_task(f.task))])
            print(f"{f.number:3d} {f.task:45s} {record.verdict.value:14s} {seconds:5.1f}s  {rows[-1][-1][:150]}",
                  file=sys.stderr, flush=True)
            if out:
                out.write(json.dumps({"pkb_id": f.number, "file": f.path.name, "task": f.task, "seconds": seconds,
                                      **record.to_dict()}) + "\n")
                out.flush()
    print(table(["PKB", "file", "task", "statement", "verdict", "why"], [r[:5] + [r[5][:160]] for r in rows]))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r[4]] = counts.get(r[4], 0) + 1
    print("\n" + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) + f" (of {len(rows)})")
    return 0


def reason(record, spec) -> str:
    """Why a file is not correct, in one line: the record's two statements, what PKB's file needs, the error."""
    if record.correct:
        return record.pkb.note if record.pkb and record.pkb.note else ""
    parts = []
    pkb = spec.pkb
    if pkb is not None and pkb.needs:
        parts.append(f"needs {pkb.needs}")
    if record.pkb and record.pkb.note:
        parts.append(record.pkb.note)
    elif pkb is not None and pkb.differs:
        parts.append(f"PKB's semantics differ: {pkb.differs}")
    parts.append((record.error or "").splitlines()[-1] if record.error else "")
    if record.verify and record.verify.mismatches:
        m = record.verify.mismatches[0]
        parts.append(f"rank {m.rank} {m.trial} {m.path}: {m.message}")
    return " | ".join(p for p in parts if p)


if __name__ == "__main__":
    sys.exit(main())
