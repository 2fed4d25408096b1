"""Rules a task's statement states, each with a test of whether a trial's inputs exercise it
(docs/task_contract.md, "Rules the trials reach").

A statement says what happens at its corners: an expert no token picks, a vocabulary W does not divide, a
value on a rounding boundary, a chain of overlapping objects, a clamp, a rounding only a 16-bit dtype does.
Random inputs reach such a corner now and then, and a candidate that ignores it is paid as if it kept it
whenever the step's trials miss it (issue 42: 6 of 92 plausible bugs were accepted or caught now and then,
all for that reason). A task declares each rule as a `Clause`: its text, how the trials reach it (an edge
case, the preset's sizes, every draw, a trial in a 16-bit dtype) and a predicate over one trial's inputs on
every rank that says whether the trial exercises it. The judge's trials reach every declared edge case in
every step (judge/seeds.py) and add a trial in the dtype a clause names; `tests/tasks/test_rule_coverage.py` draws
the trials of many steps with the judge's own input maker and asserts that every clause is reached in every
one; `benchmarks/rule_coverage.py` writes the table (docs/rule_coverage.md). Both read the same declaration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from pkb_env.contract.io import DTYPES
from pkb_env.contract.sized import World

SIXTEEN_BIT = ("bfloat16", "float16")


@dataclass(frozen=True)
class Trial:
    """One trial's inputs on every rank, as a clause's predicate reads them: `inputs[rank][name]`, the sizes
    (`trial["V"]`, `trial.world_size`), the mesh (`trial.world`, a `World`), and the trial's dtype."""

    inputs: list[dict[str, Any]]
    world: World
    dtype: str

    def __getitem__(self, name: str) -> float:
        return self.world[name]

    @property
    def world_size(self) -> int:
        return self.world.world_size

    def each(self, name: str) -> list[Any]:
        """Every rank's value of input `name`, in rank order."""
        return [args[name] for args in self.inputs]

    def cat(self, name: str, dim: int = 0) -> torch.Tensor:
        """Every rank's tensor `name` concatenated along `dim`, in rank order."""
        return torch.cat([args[name] for args in self.inputs], dim=dim)


@dataclass(frozen=True)
class Clause:
    """A rule of the statement and how every step's trials reach it.

    `reached(trial) -> bool`: whether this trial's inputs exercise the rule (a chain of three objects is
    there; some index is owned by another rank under floor(V / W) than under ceil). `by` says how the trials
    get there, for the coverage table; `edge` names the task's edge case that draws it, if one does (every
    step's trials hold each edge case once: judge/seeds.py). `dtypes`: only a trial in one of these dtypes
    can exercise it (logits rounded to a 16-bit input dtype: in float32 the rounding is no rounding); a step
    in another dtype adds one plain trial in `dtypes[0]`. `applies(sizes) -> bool`: the sizes (the preset's
    dims, W and the mesh's dimensions) at which the rule can be reached at all (an empty expert needs an
    expert a token can leave out: E > K), with `where` saying why not elsewhere.
    """

    name: str
    text: str
    reached: Callable[[Trial], bool]
    by: str
    edge: str = ""
    dtypes: tuple[str, ...] = ()
    applies: Callable[[Mapping[str, float]], bool] | None = None
    where: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"clause {self.name!r}: the name must be an identifier")
        if isinstance(self.dtypes, str):
            object.__setattr__(self, "dtypes", (self.dtypes,))
        for dtype in self.dtypes:
            if dtype not in DTYPES:
                raise ValueError(f"clause {self.name}: {dtype!r} is not a dtype name ({', '.join(DTYPES)})")
        if self.applies is not None and not self.where:
            raise ValueError(f"clause {self.name}: say where it cannot be reached (where=...) beside applies=")

    def applies_at(self, sizes: Mapping[str, float]) -> bool:
        return self.applies is None or bool(self.applies(sizes))


def extra_dtypes(clauses: Sequence[Clause], dtype: str) -> tuple[str, ...]:
    """The dtypes of the trials a step in `dtype` adds: one plain trial in each dtype that a clause needs and
    the step's dtype is not among (in the order the clauses name them)."""
    return tuple(dict.fromkeys(c.dtypes[0] for c in clauses if c.dtypes and dtype not in c.dtypes))


def draw_trial(spec, preset: str, dtype: str, world_size: int, seeds: Sequence[Mapping[str, int]]) -> Trial:
    """Every rank's inputs of one trial (seeds[rank]: that rank's seeds), made in this process by the task's
    own input maker, as the ranks make them (process groups as GroupInfo records)."""
    dims = spec.preset(preset).dims
    names = spec.parameters
    inputs = [dict(zip(names, spec.make_inputs(spec.input_context(rank, world_size, preset, dtype, "cpu",
                                                                   seeds[rank]))))
              for rank in range(world_size)]
    return Trial(inputs, spec.world(dims, world_size, dtype), dtype)
