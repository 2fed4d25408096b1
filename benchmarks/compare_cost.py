"""What the judge's element-by-element comparison costs on one output, in its own process (the verify stage).

    python benchmarks/compare_cost.py                       # 1M elements of bf16 (all_reduce at bench)
    python benchmarks/compare_cost.py --elements 4194304 --dtype float32 --repeats 5

Three answers to one expected output, each compared `--repeats` times with the summing primitives' bf16 rule
(atol 0.0039, rtol 0.0156): the same bits (the reference against itself), a correct answer that rounds
otherwise (every element moved by a relative 2^-9, as another summation order does), and a wrong one
(every element times 1.5). A step compares every rank's outputs of each of its trials, so a step at `bench`
pays this `trials` x W times in the judge's process; the wrong answer's is what most RL completions cost.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from pkb_env.contract import Tolerance
from pkb_env.judge.compare import compare_outputs
from pkb_env.tables import table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    expected = torch.randn(args.elements, generator=gen, dtype=torch.float64).to(dtype)
    moved = expected.double() * (1 + 2 ** -9 * torch.randn(args.elements, generator=gen, dtype=torch.float64))
    answers = {"the same bits": expected.clone(), "correct, rounded otherwise": moved.to(dtype),
               "wrong (x 1.5)": expected * 1.5}
    tol = Tolerance(atol=0.0039, rtol=0.0156, reason="the summing primitives' bf16 rule at W = 2")
    rows = []
    for name, got in answers.items():
        times, verdict = [], None
        for _ in range(args.repeats):
            start = time.perf_counter()
            verdict = compare_outputs(expected, got, tol, "trial 1", 0)
            times.append(time.perf_counter() - start)
        rows.append([name, "wrong" if verdict else "correct", f"{statistics.median(times) * 1e3:.1f}",
                     f"{min(times) * 1e3:.1f}-{max(times) * 1e3:.1f}"])
    print(f"{args.elements} elements of {args.dtype}, {args.repeats} repeats, {torch.get_num_threads()} thread(s)")
    print(table(["answer", "verdict", "median ms", "range ms"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
