"""What the Ulysses sequence-parallel primitives (PKB 33-38) have in common, declared once.

They are layout changes between sequence-sharded and head-sharded tensors (DeepSpeed-Ulysses, as VeOmni
and verl write them): pure data movement, compared bit-exact, whose cost is one collective over every rank.
Each `tasks/<name>/spec.py` keeps its shapes, its golden and the collective it needs.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

from typing import Callable

from pkb_env.contract import Clause, Cost, CostContext, Edge, Input, Length, Output, Preset, TaskSpec, Tensor, World
from pkb_env.tasks._attention import PREDICTABLE_SEEDS
from pkb_env.tasks._clauses import own_blocks
from pkb_env.tasks._primitives import DTYPES, EXACT, collective_cost

HEADS_LARGE = "a long sequence, 32 MiB per rank: bandwidth-bound on NVLink"


def head_presets() -> dict[str, Preset]:
    """(B, S, H, E) attention activations: `tiny` with 24 heads (W = 2, 3, 4, 6, 8 divide them), `bench` at
    PKB's (16, 16, 8, 64), `large` a 4096-token block of 32 heads of 128. A fresh dict per call."""
    return {"tiny": Preset({"B": 2, "S": 3, "H": 24, "E": 2}, "float32", "CPU ranks, milliseconds"),
            "bench": Preset({"B": 16, "S": 16, "H": 8, "E": 64}, "bfloat16",
                            "PKB's shapes: 16 sequences of 16 tokens per rank, 8 heads of 64; latency-bound"),
            "large": Preset({"B": 1, "S": 4096, "H": 32, "E": 128}, "bfloat16", HEADS_LARGE)}


def relayout(inputs: list[dict], world: World) -> list:
    """The golden of a pure layout change: the global tensor `x` is assembled from the ranks' blocks and
    handed out again by the output's layout (all of it, or another axis's blocks)."""
    return world.distribute(world.assemble(inputs, "x"), "out")


def ulysses_primitive(*, name: str, title: str, description: str, pkb_id: int, inputs: tuple[Input, ...],
                      outputs: tuple[Output, ...], golden: Callable[[list[dict], World], list],
                      presets: dict[str, Preset], collective: str = "", size: str = "",
                      cost: Callable[[CostContext], Cost] | None = None, lengths: tuple[Length, ...] = (),
                      departures: tuple[str, ...] = (), edges: tuple[Edge, ...] = (),
                      clauses: tuple[Clause, ...] = ()) -> TaskSpec:
    """A Ulysses primitive's TaskSpec: family, origin, dtypes and exact comparison; the cost is one
    `collective` over every rank with S the bytes of the declared tensor `size`, unless `cost` is given; its
    clauses: every rank's block its own, then `clauses`."""
    tensor = next(d.name for d in inputs if isinstance(d, Tensor))
    return TaskSpec(
        name=name, title=title, description=description, family="sequence", pkb_id=pkb_id,
        origin="DeepSpeed-Ulysses sequence parallelism, as VeOmni and verl write it (ulysses utils)",
        parallelism="sequence parallel (Ulysses)", inputs=inputs, outputs=outputs, golden=golden,
        cost=cost or collective_cost(collective, size), tolerance_rule=EXACT, presets=presets, dtypes=DTYPES,
        lengths=lengths, departures=(PREDICTABLE_SEEDS, *departures), edges=edges,
        clauses=(own_blocks(tensor, what="the result holds every rank's block in its place"), *clauses),
    )
