"""all_gather: every rank's tensor, stacked in rank order, returned on every rank (PKB problem 2)."""
import torch

from pkb_env.contract import Output, Replicated, Tensor
from pkb_env.tasks._primitives import EXACT, primitive


def golden(inputs, world):
    return world.distribute(torch.stack([x["tensor"] for x in inputs]), "out")


SPEC = primitive(
    name="all_gather",
    title="All-gather",
    description="Every rank holds an (M, N) tensor; every rank must return the (W, M, N) stack of all ranks' "
                "tensors in rank order.",
    origin="NCCL/torch.distributed all_gather_into_tensor (all_gather_single from torch 2.13)",
    pkb_id=2,
    inputs=(Tensor("tensor", ("M", "N")),),
    outputs=(Output("out", ("W", "M", "N"), layout=Replicated(), doc="out[j] is rank j's tensor"),),
    golden=golden,
    collective="all_gather", size="out",
    tolerance=EXACT,
    bench_note="2 MiB in per rank",
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('allgather')
