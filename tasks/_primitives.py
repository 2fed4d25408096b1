"""What the eight collective-primitive tasks (PKB problems 1-8) have in common, declared once.

They share problem sizes, dtypes, the rounding story of the summing ones, the random root of the rooted
ones, and one departure from PKB: random inputs. Keeping those here means a change (a new dtype, another
size) reaches every primitive at once. Each `tasks/<name>/spec.py` keeps what is its own: its inputs and
outputs, its golden math and its cost terms.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from pkb_env.contract import (Comm, Cost, CostContext, Exact, Input, Integers, Output, Preset, Rule, Scalar, Sum,
                              TaskSpec, World)

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""fp32 for CPU ranks, the two 16-bit types that GPU traffic uses."""

EXACT = Exact("pure data movement: every element must arrive bit-exact")
SUM = Sum(terms="W", magnitude=1, accumulate="dtype", what="the sum over W ranks (each hop rounds in the dtype)")
"""Summing primitives may add in any order (ring, tree, one-shot): results differ by rounding only. The rule
gives atol u*sqrt(W)^3 (0.088 at W = 8 in bf16) plus rtol 4u. Measured with every hop rounded in bf16 on
N(0,1) inputs (`python benchmarks/reduction_orders.py --elements N --world-size W`, 3-5 seeds): ring orders
against a tree use up to 0.91 (W = 8) and 1.00 (W = 4) of that allowance at 1M elements (bench), and 1.15
at 8M elements (W = 8, the large preset's 16 MiB blocks): there, two correct orders can be judged apart
(docs/benchmarks.md, "Known holes")."""

RANDOM_INPUTS = ("inputs are random per trial and rank (PKB fills every rank with rank+1, so every output "
                 "is a closed-form function of the rank and W that a candidate could return without "
                 "communicating)")
RANDOM_ROOT = "the root rank is drawn per trial (PKB fixes it at 0, which a candidate can hard-code)"


def presets(bench_note: str = "2 MiB") -> dict[str, Preset]:
    """`tiny` for CPU ranks, `bench` at PKB's default (M, N) = (1024, 1024) in bf16, `large` eight times
    that (16 MiB blocks), where NVLink transfers rather than launches set the time. `bench_note` says
    what the 2 MiB is on this task (per chunk, in or out per rank). A fresh dict per call."""
    return {"tiny": Preset({"M": 64, "N": 64}, "float32", "CPU ranks, milliseconds"),
            "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", f"PKB's default size, {bench_note}"),
            "large": Preset({"M": 4096, "N": 2048}, "bfloat16", "8x PKB's default: bandwidth-bound on NVLink")}


def root(name: str) -> Scalar:
    return Scalar(name, Integers(0, "W"), doc="the root rank")


def rank_sum(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The element-wise sum of one tensor per rank, accumulated in float64 and rounded once: the correctly
    rounded sum that no summation order beats; the tolerance measures an algorithm's distance from it."""
    return torch.stack([t.double() for t in tensors]).sum(0).to(tensors[0].dtype)


def collective_cost(collective: str, size: str) -> Callable[[CostContext], Cost]:
    """One nccl-tests collective over all ranks with S = the bytes of the declared tensor `size`, and the
    memory traffic of reading every input and writing every output once."""
    def cost(c: CostContext) -> Cost:
        return Cost(comm=(Comm(collective, c.nbytes(size)),), memory_bytes=c.io_bytes())
    return cost


def primitive(*, name: str, title: str, description: str, origin: str, pkb_id: int, inputs: tuple[Input, ...],
              outputs: tuple[Output, ...], golden: Callable[[list[dict], World], list], collective: str,
              size: str, tolerance: Rule, bench_note: str = "2 MiB", departures: tuple[str, ...] = ()) -> TaskSpec:
    """A primitive's TaskSpec: family, dtypes, presets and world sizes filled in (any W >= 1: at one rank
    the collective is a copy or the identity)."""
    return TaskSpec(
        name=name, title=title, description=description, family="collective", pkb_id=pkb_id, origin=origin,
        parallelism="collective primitive", inputs=inputs, outputs=outputs, golden=golden,
        cost=collective_cost(collective, size), tolerance_rule=tolerance, presets=presets(bench_note),
        dtypes=DTYPES, departures=(RANDOM_INPUTS, *departures),
    )
