"""reduce_scatter: the element-wise sum over ranks, row block r returned on rank r (PKB problem 7)."""
from pkb_env.contract import Output, Sharded, Tensor
from pkb_env.tasks._primitives import SUM, primitive, rank_sum


def golden(inputs, world):
    return world.distribute(rank_sum([x["tensor"] for x in inputs]), "out")


SPEC = primitive(
    name="reduce_scatter",
    title="Reduce-scatter (sum)",
    description="Every rank holds a (W*M, N) tensor; rank r must return the element-wise sum over all ranks "
                "of rows [r*M, (r+1)*M).",
    origin="NCCL/torch.distributed reduce_scatter_tensor",
    pkb_id=7,
    inputs=(Tensor("tensor", ("W * M", "N")),),
    outputs=(Output("out", ("W * M", "N"), layout=Sharded(0), doc="block r of the sum over ranks"),),
    golden=golden,
    collective="reduce_scatter", size="tensor",
    tolerance=SUM,
    bench_note="2 MiB out per rank",
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('reducescatter')
