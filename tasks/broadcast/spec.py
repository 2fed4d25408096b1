"""broadcast: the root's tensor, returned on every rank; the root changes per trial (PKB problem 3)."""
from pkb_env.contract import Output, Replicated, Tensor
from pkb_env.tasks._primitives import EXACT, RANDOM_ROOT, primitive, root


def golden(inputs, world):
    src = inputs[0]["src"]
    return world.distribute(inputs[src]["tensor"], "out")


SPEC = primitive(
    name="broadcast",
    title="Broadcast",
    description="Every rank holds an (M, N) tensor and the same root rank `src`; every rank must return "
                "rank src's tensor. The other ranks' tensors hold unrelated values and must be ignored.",
    origin="NCCL/torch.distributed broadcast",
    pkb_id=3,
    inputs=(Tensor("tensor", ("M", "N"), doc="only rank src's is used"), root("src")),
    outputs=(Output("out", ("M", "N"), layout=Replicated(), doc="rank src's tensor"),),
    golden=golden,
    collective="broadcast", size="tensor",
    tolerance=EXACT,
    departures=(RANDOM_ROOT,),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('broadcast')
