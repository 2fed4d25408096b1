"""What the eight collective-primitive tasks (PKB problems 1-8) have in common, declared once.

The primitives are one family: they are judged on the same problem sizes and dtypes, a data-movement
primitive must deliver every element bit-exact, and the summing ones (all_reduce, reduce, reduce_scatter)
share the same rounding story and therefore the same tolerances. Keeping those values here means a change
to them (a new dtype, a wider bf16 bound) reaches every primitive at once instead of drifting between
eight copies. Each `tasks/<name>/spec.py` keeps only what is its own: how its inputs are laid out, its
golden math, its nccl-tests traffic model and the texts the prompt shows.

This is a plain module, not a task package: `pkb_env.task.task_names()` lists only subpackages of
`tasks/`, so it never shows up as a task.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch

from pkb_env.task import EXACT, Args, InputContext, Outputs, Preset, TaskSpec, Tolerance, Traffic, WorldSizes

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""The dtypes every primitive takes: fp32 for CPU ranks, the two 16-bit types that GPU traffic uses."""

EXACT_TOLERANCES: Mapping[str, Tolerance] = {dtype: EXACT for dtype in DTYPES}
"""Data-movement primitives copy elements without arithmetic, so any difference is a wrong element."""

SUM_TOLERANCES: Mapping[str, Tolerance] = {
    "float32": Tolerance(1e-5, 1e-5, "summation order differs between algorithms"),
    # Each hop rounds the partial sum, which is larger than the final sum when ranks cancel: ring and tree
    # orders at 8 ranks over 8M N(0,1) elements needed atol 0.052 (bf16) and 0.0065 (fp16) beside the
    # rtol; the atols below leave about 2x room for world sizes up to 8.
    "bfloat16": Tolerance(1e-1, 3e-2, "bf16 partial sums rounded at each of up to W-1 hops, 2^-8 "
                                      "relative to the partial sum, which can exceed the final sum"),
    "float16": Tolerance(1.5e-2, 5e-3, "fp16 partial sums rounded at each of up to W-1 hops, 2^-11 "
                                       "relative to the partial sum, which can exceed the final sum"),
}
"""Summing primitives may add in any order (ring, tree, one-shot), so results differ by rounding only."""


def presets(bench_note: str = "2 MiB") -> dict[str, Preset]:
    """The primitives' sizes: `tiny` for CPU ranks, `bench` at PKB's default (M, N) = (1024, 1024) in bf16,
    `large` eight times that (16 MiB blocks), where NVLink transfers rather than launches set the time.

    `bench_note` says what the 2 MiB is on this task (per chunk, in or out per rank), because the buffer
    that holds one (M, N) block differs between primitives. A fresh dict on every call, so no two specs
    share mutable state.
    """
    return {"tiny": Preset({"M": 64, "N": 64}, "float32", "CPU ranks, milliseconds"),
            "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", f"PKB's default size, {bench_note}"),
            "large": Preset({"M": 4096, "N": 2048}, "bfloat16", "8x PKB's default: bandwidth-bound on NVLink")}


def draw_root(ctx: InputContext) -> int:
    """The root rank of a rooted primitive (broadcast, reduce, gather, scatter), drawn anew every trial.

    Drawn from the shared stream so that every rank receives the same root, and per trial so that a
    candidate cannot hard-code rank 0 as the root.
    """
    return int(ctx.randint(0, ctx.world_size, shared=True))


def rank_sum(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The element-wise sum of one tensor per rank, in the tensors' dtype.

    Accumulated in float64 and rounded once at the end, so the golden value is the correctly rounded sum
    that no summation order beats; the tolerances above measure an algorithm's distance from it.
    """
    return torch.stack([t.double() for t in tensors]).sum(0).to(tensors[0].dtype)


def primitive(*, name: str, title: str, description: str, origin: str, pkb_id: int | None,
              make_inputs: Callable[[InputContext], Args],
              golden: Callable[[Sequence[Args], int], list[Outputs]],
              traffic: Callable[[int, Mapping[str, int], int], Traffic],
              tolerances: Mapping[str, Tolerance], inputs_doc: str, outputs_doc: str,
              bench_note: str = "2 MiB", family: str = "collective",
              parallelism: str = "collective primitive", dtypes: tuple[str, ...] = DTYPES,
              world_sizes: WorldSizes | None = None) -> TaskSpec:
    """A primitive's TaskSpec, with the family-wide fields filled in.

    Every primitive is defined at any world size (one rank included: the collective is then a copy or
    the identity), hence `WorldSizes(minimum=1)` by default. `tolerances` is copied, so a spec never
    shares a mutable mapping with another.
    """
    return TaskSpec(
        name=name, title=title, description=description, family=family, parallelism=parallelism,
        origin=origin, pkb_id=pkb_id, make_inputs=make_inputs, golden=golden, traffic=traffic,
        presets=presets(bench_note), dtypes=dtypes, tolerances=dict(tolerances),
        world_sizes=world_sizes if world_sizes is not None else WorldSizes(minimum=1),
        inputs_doc=inputs_doc, outputs_doc=outputs_doc,
    )
