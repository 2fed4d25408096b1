"""ulysses_all_gather_variable: an all-gather of blocks whose sizes differ by rank and by call (PKB 35).

Ulysses gathers sequences whose per-rank lengths differ (unpadded packed sequences): each rank holds a
block of `rows` rows, drawn per rank on every call, and no rank knows the others'. The reference exchanges
the sizes, syncs the host to read them, then gathers blocks padded to the largest. Levers: no host sync
(the prompt states the largest a block can be, so padded slots can be gathered with the sizes in one
round and compacted on the device), no padding on the wire (gather straight into the packed output from
peers' memory), one launch.
"""
import torch

from pkb_env.contract import Clause, Comm, Const, Cost, Group, Length, Output, Preset, Replicated, Tensor
from pkb_env.tasks._clauses import extreme_rows_edge
from pkb_env.tasks._ulysses import ulysses_primitive


def golden(inputs, world):
    return world.distribute(torch.cat([args["x"] for args in inputs]), "out")


def cost(c):
    """The all-gather of W blocks, every one counted at its smallest (3M/4 rows): a lower bound on any
    call, whatever the rows drawn; x read and the gathered rows written once."""
    return Cost(comm=(Comm("all_gather", c["W"] * c.nbytes("x")),), memory_bytes=(1 + c["W"]) * c.nbytes("x"))


SPEC = ulysses_primitive(
    name="ulysses_all_gather_variable",
    title="Ulysses all-gather of variable-size blocks",
    description="Every rank holds x (rows, N) with its own number of rows, drawn per call (no rank knows the "
                "others'); every rank must return all ranks' x concatenated along dim 0 in rank order.",
    pkb_id=35,
    inputs=(
        Tensor("x", ("rows", "N"), doc="this rank's block"),
        Const("gather_dim", 0),
        Group("group", "world"),
    ),
    lengths=(Length("rows", "3 * M / 4", "5 * M / 4 + 1", doc="this rank's rows: M on average, at most 5M/4"),),
    outputs=(Output("out", max_shape=("W * rows", "N"), layout=Replicated(),
                    doc="(sum over ranks of rows, N): rank 0's rows first"),),
    golden=golden,
    cost=cost,
    presets={"tiny": Preset({"M": 8, "N": 8}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"M": 1024, "N": 1024}, "bfloat16",
                             "PKB's size: 768 to 1280 rows of 1024 per rank (2 MiB on average)"),
             "large": Preset({"M": 4096, "N": 2048}, "bfloat16", "16 MiB per rank on average: bandwidth-bound")},
    departures=("the rows differ by rank and by call (PKB gives every rank the same (M, N), so the size "
                "exchange it pays for never matters)",),
    edges=(extreme_rows_edge("rows", "3 * M / 4", "5 * M / 4"),),
    clauses=(Clause("ragged", "every rank's own number of rows: blocks of different sizes",
                    lambda t: len({a["x"].shape[0] for a in t.inputs}) > 1, "edge case extreme_rows (rank 0 3M/4 "
                    "rows, the last rank 5M/4); most plain draws too", edge="extreme_rows",
                    applies=lambda x: x["W"] > 1, where="one block"),),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('ulysses_all_gather_variable_primitive')
