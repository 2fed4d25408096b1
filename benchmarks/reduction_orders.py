"""How far apart two correct sums can be: a W-rank sum in the dtype, added in ring order against tree order.

    python benchmarks/reduction_orders.py [--world-size 8] [--elements 8388608] [--dtype bfloat16] [--seeds 3]

The summing primitives (tasks/_primitives.py) accept any order of addition: each hop of a ring or a tree
rounds in the dtype, so two correct candidates differ by rounding alone. This measures that difference on
N(0,1) inputs, with every hop rounded to `--dtype`: the ring from each starting rank (W orders) and a
pairwise tree, and between any two orders the largest absolute difference and the largest fraction of the
allowance the tasks declare (atol from Sum(terms="W", magnitude=1), plus rtol = 4u of the dtype times the
magnitude): the allowance must cover every element, so that fraction must stay below 1.
"""
from __future__ import annotations

import argparse
import itertools
import sys

import torch

from pkb_env.contract import Sum
from pkb_env.contract.tolerance import unit_roundoff
from pkb_env.contract.io import DTYPES


def ring(values: list[torch.Tensor], start: int) -> torch.Tensor:
    acc = values[start].clone()
    for k in range(1, len(values)):
        acc = (acc.float() + values[(start + k) % len(values)].float()).to(acc.dtype)
    return acc


def tree(values: list[torch.Tensor]) -> torch.Tensor:
    level = list(values)
    while len(level) > 1:
        level = [(a.float() + b.float()).to(a.dtype) for a, b in zip(level[::2], level[1::2])] + \
                (level[-1:] if len(level) % 2 else [])
    return level[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--elements", type=int, default=8 << 20)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]
    atol, _ = Sum(terms="W", magnitude=1, accumulate="dtype").atol(dtype, {"W": args.world_size})
    rtol = 4 * unit_roundoff(dtype)
    worst, used = 0.0, 0.0
    for seed in range(args.seeds):
        g = torch.Generator().manual_seed(seed)
        values = [torch.randn(args.elements, generator=g).to(dtype) for _ in range(args.world_size)]
        sums = [ring(values, r) for r in range(args.world_size)] + [tree(values)]
        for a, b in itertools.combinations(sums, 2):
            diff = (a.float() - b.float()).abs()
            worst = max(worst, float(diff.max()))
            used = max(used, float((diff / (atol + rtol * b.float().abs())).max()))
    print(f"{args.world_size} ranks, {args.elements} elements, {args.dtype}, {args.seeds} seeds, ring orders and a "
          f"tree: largest difference {worst:.4f} (atol u*sqrt(W)^3 = {atol:.4f}, rtol {rtol:.4f}); largest "
          f"fraction of the allowance {used:.3f}")
    return 0 if used < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
