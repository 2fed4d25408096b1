"""Clauses (pkb_env/contract/clauses.py) that many tasks state alike, and the edge cases that reach them.

- `own_blocks`: every rank's block of an input is its own (PKB filled every rank with rank + 1, so a
  candidate could compute its peers' data; a draw that repeated blocks would let W x one block pass a sum);
- `root_other_than_zero`: a root rank drawn per call reaches a rank other than 0 in every step (uniform
  roots at W = 2 are all 0 in one step of eight: a candidate hard-coding rank 0 passed those);
- `sixteen_bit`: a rule of precision that only a 16-bit dtype exercises ("compute in float32 or wider":
  in float32 a candidate that computes in the input dtype computes in float32), reached by a trial in
  bfloat16 that the judge adds to every step of another dtype.

A plain module, not a task package (`pkb_env.task.task_names()` skips names starting with an underscore).
"""
from __future__ import annotations

import torch

from pkb_env.contract import Clause, Edge, Replicated, Sharded, Trial
from pkb_env.contract.sized import same_values

SIXTEEN = ("bfloat16", "float16")


def blocks(trial: Trial, name: str) -> list[torch.Tensor]:
    """One value per distinct block of input `name` (a Sharded block, a PerRank coordinate; one for a Replicated
    input), as the ranks hold them."""
    decl = next(d for d in trial.world.inputs if d.name == name)
    layout, seen = trial.world.layout, {}
    for rank, args in enumerate(trial.inputs):
        if isinstance(decl.layout, Replicated):
            key = ()
        elif isinstance(decl.layout, Sharded):
            key = decl.layout.block_index(layout, rank)
        else:
            key = tuple(layout.coords(rank)[d] for d in decl.layout.scope(layout))
        seen.setdefault(key, args[name])
    return list(seen.values())


def own_blocks(*names: str, what: str = "") -> Clause:
    """Every distinct block of each input in `names` differs from every other: what the statement combines
    over ranks is not one rank's data W times."""
    def reached(trial: Trial) -> bool:
        for name in names:
            found = blocks(trial, name)
            if any(same_values(found[i], found[j]) for i in range(len(found)) for j in range(i + 1, len(found))):
                return False
        return True

    listed = ", ".join(names)
    return Clause("own_blocks", f"every rank's {listed} its own{': ' + what if what else ''}", reached,
                  "every draw (secret per-rank seeds; PKB filled every rank with rank + 1)",
                  applies=lambda x: x["W"] > 1, where="W = 1 (one block)")


def _other_root(value: int, draw) -> int:
    world = int(draw.env["W"])
    if world < 2:
        return value
    return 1 + int(torch.randint(world - 1, (), generator=draw.gen, device=draw.gen.device))


def root_edge(scalar: str) -> Edge:
    """The root `scalar` set to a rank other than 0, drawn per call (the same on every rank)."""
    return Edge("root_not_zero", scalar, _other_root, "a root rank other than 0")


def root_other_than_zero(scalar: str) -> Clause:
    return Clause("root_drawn", f"the root {scalar} is drawn per call: a root other than rank 0",
                  lambda t: t.inputs[0][scalar] != 0, "edge case root_not_zero (uniform roots at W = 2 are 0 in "
                  "every trial of one step in eight)", edge="root_not_zero", applies=lambda x: x["W"] > 1,
                  where="W = 1 (the root is rank 0)")


def sixteen_bit(name: str, text: str) -> Clause:
    """A precision rule only a 16-bit dtype exercises, reached by a trial in bfloat16 in every float32 step."""
    return Clause(name, text, lambda t: t.dtype in SIXTEEN, "a trial in bfloat16 in every step of another "
                  "dtype (in float32 a candidate computing in the input dtype computes in float32)", dtypes=SIXTEEN)
