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
                              TaskSpec, Tensor, World)
from pkb_env.tasks._clauses import own_blocks, root_edge, root_other_than_zero

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""fp32 for CPU ranks, the two 16-bit types that GPU traffic uses."""

EXACT = Exact("pure data movement: every element must arrive bit-exact")
SUM = Sum(terms="W", magnitude="min(W - 1, 3)", accumulate="dtype",
          what="the sum over W ranks (each of the W - 1 hops rounds in the dtype)")
"""Summing primitives may add in any order (ring, tree, one-shot): results differ by rounding only. The rule
gives atol min(W - 1, 3) u sqrt(W)^3 (0.27 at W = 8 in bf16; none at W = 1, where nothing is added, and
u sqrt(2)^3 at W = 2, where every order gives the one rounding of a + b) plus rtol 4u. With magnitude 1
(atol u*sqrt(W)^3), ring
orders against a tree used up to 0.91 (W = 8) and 1.00 (W = 4) of the allowance at 1M elements (bench,
every hop rounded in bf16 on N(0,1) inputs: `python benchmarks/reduction_orders.py --elements N
--world-size W`, 3-5 seeds) and 1.15 at 8M elements, and gloo's float32 reference reached 0.66 of it
against the golden over 200 trials at tiny (issue 31): two correct orders could be judged apart, and a
candidate more exact than the reference rejected. Magnitude 3 from W = 4 on (2 at W = 3) puts the
reference within half of the allowance (docs/task_contract.md, "Against the truth"); a rank's contribution left out (an error of
about 1 per element) is still far outside it."""

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
    the collective is a copy or the identity); its clauses: every rank's tensor its own, and a root other than
    rank 0 in every step (an edge case) where the task has a root."""
    roots = [d.name for d in inputs if isinstance(d, Scalar)]
    tensor = next(d.name for d in inputs if isinstance(d, Tensor))
    return TaskSpec(
        name=name, title=title, description=description, family="collective", pkb_id=pkb_id, origin=origin,
        parallelism="collective primitive", inputs=inputs, outputs=outputs, golden=golden,
        cost=collective_cost(collective, size), tolerance_rule=tolerance, presets=presets(bench_note),
        dtypes=DTYPES, departures=(RANDOM_INPUTS, *departures),
        edges=tuple(root_edge(r) for r in roots),
        clauses=(own_blocks(tensor), *(root_other_than_zero(r) for r in roots)),
    )
