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


# -- norms: a row whose mean of squares is of the order of eps -----------------------------------------------
QUIET = 3e-3   # a quiet row's values scaled by this: mean(x^2) about 1e-5, eps's order, decides the norm


def quiet_row_edge(name: str, rows: str) -> Edge:
    """Row r of every rank's `name` (viewed as (`rows`, -1)), r drawn per call, scaled by QUIET: its mean of
    squares is of the order of eps, so where eps enters (inside the square root) decides the output."""
    def rewrite(x, draw):
        count = int(draw.env[rows])
        row = int(torch.randint(count, (), generator=draw.gen, device=draw.gen.device))
        out = x.clone()
        out.view(count, -1)[row] *= QUIET
        return out
    return Edge("quiet_row", name, rewrite, "a row of RMS about sqrt(eps)", everywhere=True)


def quiet_row(mean_squares, eps: float) -> Clause:
    """`mean_squares(trial)`: the rows' means of squares as the statement computes them (over every rank)."""
    return Clause("eps_inside", f"mean(x^2) + eps under the square root: a row whose mean of squares is below "
                  f"10 eps ({10 * eps:g})", lambda t: bool((mean_squares(t) < 10 * eps).any()),
                  "edge case quiet_row (one row scaled by 3e-3 on every rank)", edge="quiet_row")


# -- index lists: a repeated index ------------------------------------------------------------------------
def repeat_edge(name: str) -> Edge:
    """On the rank it lands on, the second entry of index list `name` repeats its first."""
    def rewrite(ids, draw):
        if not draw.here or ids.numel() < 2:
            return ids
        ids = ids.clone()
        ids[1] = ids[0]
        return ids
    return Edge("repeated_index", name, rewrite, "an index repeated")


def repeated(name: str, what: str) -> Clause:
    return Clause("repeats", f"repeats allowed: an index twice in one rank's {name} ({what})",
                  lambda t: any(int(ids.unique().numel()) < ids.numel() for ids in t.each(name)),
                  "edge case repeated_index (most plain draws too)", edge="repeated_index")


def remote(name: str, owner, what: str) -> Clause:
    """An entry of some rank's index list `name` that another rank owns (`owner(trial, ids) -> ranks`)."""
    return Clause("remote", f"{what}: an index another rank owns",
                  lambda t: any(bool((owner(t, ids) != r).any()) for r, ids in enumerate(t.each(name))),
                  "every draw (indices uniform over every rank's rows)", applies=lambda x: x["W"] > 1,
                  where="W = 1 (one owner)")
