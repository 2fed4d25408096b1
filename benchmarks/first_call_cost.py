"""Where a candidate's first calls spend their time inside a judged rank (issue 23, item 1).

    python benchmarks/first_call_cost.py --executor cuda --world-size 1 --preset bench --steps 3

A judged rank is contained: nothing leaves it but what the step reports. So the candidate is wrapped: its
module-level `compile_cuda` and `symmetric_buffer` (the runtime's, as the expert imports them), every
barrier of a buffer, and `solution` itself are timed with the device synchronised around each, and the
third call (the last trial) raises with the timings, which the step's feedback carries back. Each step
is a fresh candidate rank set (a spare, pre-started like every candidate's); the reference's own calls,
wrapped alike, are the baseline. Times in ms: `callN` is the whole call, the others the parts named.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pkb_env import JudgeConfig, JudgeService
from pkb_env.task import load_task

ROOT = Path(__file__).resolve().parents[1]

WRAPPER = r'''

import time as _pkb_time

_pkb_marks, _pkb_calls = [], [0]


def _pkb_sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _pkb_timed(name, fn):
    def timed(*args, **kwargs):
        _pkb_sync()
        begun = _pkb_time.perf_counter()
        out = fn(*args, **kwargs)
        _pkb_sync()
        _pkb_marks.append(f"{name} {1e3 * (_pkb_time.perf_counter() - begun):.2f}")
        return out
    return timed


if "compile_cuda" in globals():
    compile_cuda = _pkb_timed("compile", compile_cuda)
if "symmetric_buffer" in globals():
    _pkb_seen = set()
    _pkb_buffer = _pkb_timed("buffer", symmetric_buffer)

    def symmetric_buffer(*args, **kwargs):
        made = _pkb_buffer(*args, **kwargs)
        if id(made) not in _pkb_seen:   # each buffer's barrier wrapped once
            _pkb_seen.add(id(made))
            made.barrier = _pkb_timed("barrier", made.barrier)
        return made

_pkb_solution = solution


def solution(*args):
    _pkb_calls[0] += 1
    out = _pkb_timed(f"call{_pkb_calls[0]}", _pkb_solution)(*args)
    if _pkb_calls[0] == 3:
        raise RuntimeError("timings ms: " + "; ".join(_pkb_marks))
    return out
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cuda")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--task", default="all_reduce")
    parser.add_argument("--candidate", default=str(ROOT / "solutions" / "experts" / "all_reduce.py"))
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    sources = {"reference": load_task(args.task).reference_source, Path(args.candidate).name:
               Path(args.candidate).read_text()}
    config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset)
    with JudgeService(config) as judge:
        session = judge.open(args.task)
        session.judge(sources["reference"])   # the reference timed, the spares started
        for name, source in sources.items():
            for step in range(args.steps):
                record = session.judge(source + WRAPPER)
                found = re.search(r"RuntimeError: timings ms: ([^\n]*)", record.feedback or "")
                print(f"{name}, step {step + 1}: {found.group(1).split('; rank ')[0] if found else record.feedback}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
