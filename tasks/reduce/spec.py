"""reduce: the element-wise sum over ranks, returned on one root rank only (PKB problem 4)."""
from pkb_env.contract import Output, Tensor
from pkb_env.tasks._primitives import RANDOM_ROOT, SUM, primitive, rank_sum, root


def golden(inputs, world):
    dst = inputs[0]["dst"]
    total = rank_sum([x["tensor"] for x in inputs])
    return [total if rank == dst else None for rank in range(world.world_size)]


SPEC = primitive(
    name="reduce",
    title="Reduce (sum) to one rank",
    description="Every rank holds an (M, N) tensor and the same root rank `dst`; rank dst must return the "
                "element-wise sum of all ranks' tensors and every other rank must return None.",
    origin="NCCL/torch.distributed reduce",
    pkb_id=4,
    inputs=(Tensor("tensor", ("M", "N")), root("dst")),
    outputs=(Output("out", ("M", "N"), only_on="dst", doc="the sum over ranks"),),
    golden=golden,
    collective="reduce", size="tensor",
    tolerance=SUM,
    departures=(RANDOM_ROOT, "ranks other than dst return None (PKB returns their unchanged input there and "
                             "compares it, which tests nothing)"),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('reduce')
