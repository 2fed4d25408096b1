"""all_reduce: the element-wise sum over ranks, returned on every rank (PKB problem 1)."""
from pkb_env.contract import Output, Replicated, Tensor
from pkb_env.tasks._primitives import SUM, primitive, rank_sum


def golden(inputs, world):
    return world.distribute(rank_sum([x["tensor"] for x in inputs]), "out")


SPEC = primitive(
    name="all_reduce",
    title="All-reduce (sum)",
    description="Every rank holds a tensor of the same shape; every rank must return the element-wise "
                "sum of all ranks' tensors.",
    origin="NCCL/torch.distributed all_reduce",
    pkb_id=1,
    inputs=(Tensor("tensor", ("M", "N")),),
    outputs=(Output("out", ("M", "N"), layout=Replicated(), doc="the sum over ranks"),),
    golden=golden,
    collective="all_reduce", size="tensor",
    tolerance=SUM,
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('allreduce')
