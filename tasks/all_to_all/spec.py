"""all_to_all: chunk r of every rank delivered to rank r, in source-rank order (PKB problem 8)."""
import torch

from pkb_env.contract import Output, Tensor
from pkb_env.tasks._primitives import EXACT, primitive


def golden(inputs, world):
    return [torch.stack([x["tensor"][rank] for x in inputs]) for rank in range(world.world_size)]


SPEC = primitive(
    name="all_to_all",
    title="All-to-all",
    description="Every rank holds a (W, M, N) tensor whose chunk j is addressed to rank j; rank r must "
                "return the (W, M, N) tensor whose chunk j is rank j's chunk r.",
    origin="NCCL/torch.distributed all_to_all_single",
    pkb_id=8,
    inputs=(Tensor("tensor", ("W", "M", "N"), doc="chunk j goes to rank j"),),
    outputs=(Output("out", ("W", "M", "N"), doc="on rank r, out[j] is rank j's tensor[r]"),),
    golden=golden,
    collective="all_to_all", size="tensor",
    tolerance=EXACT,
    bench_note="2 MiB per chunk",
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('alltoall')
