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

from pkb_env.contract import Clause, Edge, Expr, Replicated, Sharded, Trial
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
                  applies=lambda x: x["W"] > 1, where="one block")


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
                  where="the root is rank 0")


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
    return Edge("quiet_row", name, rewrite, "a row of RMS about the square root of eps", everywhere=True)


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
                  where="one owner")


# -- clipping: calls that clip and calls that do not ------------------------------------------------------
def clip_edges(max_norm: str) -> tuple[Edge, ...]:
    """`max_norm` (a Scalar drawn as uniform in [0.5, 1.5) times the expected norm) set to a quarter of its
    draw (the call clips) or to four times it (it does not): with a uniform draw all of a step's trials fall
    on one side in one step in four."""
    return (Edge("clips", max_norm, lambda value, draw: value / 4, "max_norm well under the norm: coef < 1"),
            Edge("does_not_clip", max_norm, lambda value, draw: value * 4, "max_norm well over the norm: coef = 1"))


def clip_clauses(norm) -> tuple[Clause, ...]:
    """`norm(trial)`: the total norm as the statement defines it, in float64."""
    return (Clause("clips", "coef = min(1, max_norm / total_norm) below 1: the gradients scaled", lambda t:
                   t.inputs[0]["max_norm"] < float(norm(t)), "edge case clips (half the plain draws too)",
                   edge="clips"),
            Clause("does_not_clip", "coef = 1: the gradients left as they are", lambda t:
                   t.inputs[0]["max_norm"] >= float(norm(t)), "edge case does_not_clip (half the plain draws too)",
                   edge="does_not_clip"),
            sixteen_bit("fp32_sums", "the sum of squares accumulated in fp32 (a 16-bit gradient's squares summed "
                        "in its own dtype lose the norm's low bits)"))


# -- ragged lengths: the fewest on rank 0, the most on the last rank ---------------------------------------
def extreme_rows_edge(length: str, fewest: str, most: str) -> Edge:
    """Length `length` (drawn per rank in [fewest, most]) set to `fewest` on rank 0 and `most` on the last
    rank, the others keeping their draw: the blocks differ in every step (all equal in about one step in a
    hundred at W = 2 otherwise)."""
    low, high = Expr(fewest), Expr(most)

    def rewrite(rows, draw):
        world = int(draw.env["W"])
        if world < 2 or draw.coords["world"] not in (0, world - 1):
            return rows
        return (low if draw.coords["world"] == 0 else high).integer(draw.env)

    return Edge("extreme_rows", length, rewrite, f"the fewest {length} on rank 0 and the most on the last rank",
                everywhere=True)
