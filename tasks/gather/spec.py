"""gather: every rank's tensor, stacked in rank order on one root rank only (PKB problem 6)."""
import torch

from pkb_env.contract import Output, Tensor
from pkb_env.tasks._primitives import EXACT, RANDOM_ROOT, primitive, root


def golden(inputs, world):
    dst = inputs[0]["dst"]
    stacked = torch.stack([x["tensor"] for x in inputs])
    return [stacked if rank == dst else None for rank in range(world.world_size)]


SPEC = primitive(
    name="gather",
    title="Gather to one rank",
    description="Every rank holds an (M, N) tensor and the same root rank `dst`; rank dst must return the "
                "(W, M, N) stack of all ranks' tensors in rank order and every other rank must return None.",
    origin="NCCL/torch.distributed gather",
    pkb_id=6,
    inputs=(Tensor("tensor", ("M", "N")), root("dst")),
    outputs=(Output("out", ("W", "M", "N"), only_on="dst", doc="out[j] is rank j's tensor"),),
    golden=golden,
    collective="gather", size="out",
    tolerance=EXACT,
    bench_note="2 MiB in per rank",
    departures=(RANDOM_ROOT, "ranks other than dst return None (PKB returns their input there)"),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('gather')
