"""scatter: the root's W chunks, chunk r delivered to rank r; the root changes per trial (PKB problem 5)."""
from pkb_env.contract import Output, Tensor
from pkb_env.tasks._primitives import EXACT, RANDOM_ROOT, primitive, root


def golden(inputs, world):
    src = inputs[0]["src"]
    return [inputs[src]["chunks"][rank].clone() for rank in range(world.world_size)]


SPEC = primitive(
    name="scatter",
    title="Scatter",
    description="Every rank holds a (W, M, N) tensor of chunks and the same root rank `src`; rank r must "
                "return rank src's chunk r. The chunks held by other ranks hold unrelated values and must "
                "be ignored.",
    origin="NCCL/torch.distributed scatter",
    pkb_id=5,
    inputs=(Tensor("chunks", ("W", "M", "N"), doc="only rank src's are used"), root("src")),
    outputs=(Output("out", ("M", "N"), doc="on rank r, rank src's chunks[r]"),),
    golden=golden,
    collective="scatter", size="chunks",
    tolerance=EXACT,
    bench_note="2 MiB out",
    departures=(RANDOM_ROOT, "non-root ranks hold random chunks (PKB: zeros), so reading local data is caught"),
)
