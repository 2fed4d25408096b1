"""Edge cases a task's statement defines, drawn into some calls' inputs (docs/task_contract.md, "Edge cases").

Random inputs almost never reach the cases a statement singles out: a standard-normal block is never all
zero, float32 logits never tie at the k-th value, so a candidate that ignores the rule is paid as if it
kept it (issue 31). A task names each such case (`Edge`): which input it rewrites and how. `make_inputs`
turns a call's plain draw into one of them when the call's *shared* seed says so (`edge_of`): one call in
two is an edge case, uniform over the declared ones. The shared seed is the same on every rank of the
call, so all ranks agree on the case and on the rank it lands on (`holder`), and the reference, the
golden and the candidate see the same inputs. No argument says which case a call is; only the values do,
as they would in a real run. The judge, which holds the step's secret, picks its trials' seeds so that
every declared case is among a step's trials, at secret positions (judge/seeds.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import torch

from pkb_env.contract.seeding import derive_seed
from pkb_env.contract.mesh import MeshLayout


@dataclass(frozen=True)
class EdgeDraw:
    """What an edge's rewrite knows: a generator every rank of the call shares (the same positions on every
    rank), whether this rank holds the chosen rank's block of the input, and the sizes; `given`: this rank's
    values of the inputs the rewritten input reads (a Custom's or FromInputs' `reads`), so that a rewrite can
    place a value relative to them (a Gaussian just outside the field of view of this rank's camera)."""

    gen: torch.Generator
    here: bool
    env: Mapping[str, float]
    coords: Mapping[str, int] = field(default_factory=dict)  # this rank's mesh coordinates ({"world": rank})
    given: Mapping[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class Edge:
    """An edge case of the task's statement, as a rewrite of one input right after it is drawn.

    `apply(value, draw) -> value` returns the input's new value (same shape and dtype; the judge checks).
    `input` may also name a `Length`: `apply(size, draw) -> int >= 0` rewrites the call's drawn size before any
    input is made (the ranks with no data at all: `0 if draw.coords["world"] % 2 else size`), or a `Scalar`:
    `apply(value, draw)` returns the call's value (a root rank other than 0).
    Inputs that read `input` (FromInputs, Custom with reads) are made after it, so they see the edge case.
    `everywhere`: the rewrite applies on every rank (ties in every rank's logits); otherwise only the
    holder's block (and its replicas) is rewritten and `draw.here` says whether this rank holds it.
    `input` may also name a `Routing`: `apply(logits, draw) -> logits` rewrites each member's gate logits (T, E)
    before its top-k, on every rank of every group alike (an expert no token picks: that column lowered below
    every other logit); `draw.coords` then holds the member's index in its group ({"member": m}).
    `text` names the case in the feedback: "an all-zero block"; the judge adds where ("in rank 1's x").
    `also`: further (input, apply) rewrites of the same call, for a case that needs two inputs to agree (three
    objects in a chain need three objects: the count raised, then the masks drawn), each applied as `input`'s.
    """

    name: str
    input: str
    apply: Callable[[torch.Tensor, EdgeDraw], torch.Tensor]
    text: str
    everywhere: bool = False
    also: tuple[tuple[str, Callable[[torch.Tensor, EdgeDraw], torch.Tensor]], ...] = ()

    @property
    def rewrites(self) -> dict[str, Callable[[torch.Tensor, EdgeDraw], torch.Tensor]]:
        """Input (or length, or routing) name -> its rewrite in this case."""
        return {self.input: self.apply, **dict(self.also)}


def edge_of(shared_seed: int, edges: Sequence[Edge]) -> Edge | None:
    """The edge case of a call whose shared seed is `shared_seed`: one in two calls, uniform over `edges`."""
    if not edges:
        return None
    pick = derive_seed(shared_seed, "edge case") % (2 * len(edges))
    return edges[pick] if pick < len(edges) else None


def holder(shared_seed: int, world_size: int) -> int:
    """The rank whose block the edge case lands on (every rank computes the same)."""
    return derive_seed(shared_seed, "edge holder") % world_size


def edge_generator(shared_seed: int, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(shared_seed, "edge draw"))
    return gen


def describe(edge: Edge, shared_seed: int, layout: MeshLayout) -> str:
    """Where the case is, for the feedback: "an all-zero block in rank 1's x" (no value of any input)."""
    if edge.everywhere:
        return f"{edge.text} in every rank's {edge.input}"
    return f"{edge.text} in rank {holder(shared_seed, layout.world_size)}'s {edge.input}"
