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

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
import torch  # noqa: E402
from pkb_env.contract import Arg, Computed, Pkb  # noqa: E402  (kept apart from the task's own)


def _pkb_tensor(call):
    """PKB passes the root its (W, M, N) chunks and every other rank a zero (M, N) buffer to receive into."""
    chunks = call.values["chunks"]
    return chunks if call.rank == call.values["src"] else torch.zeros_like(chunks[0])


PKB = Pkb("scatter", params=(Computed("tensor", _pkb_tensor, "chunks on rank src, a zero (M, N) buffer elsewhere"),
                              Arg("src")))
