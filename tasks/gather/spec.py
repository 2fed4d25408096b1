"""gather: every rank's tensor, stacked in rank order on one root rank only (PKB problem 6)."""
import torch

from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import EXACT_TOLERANCES, draw_root, primitive


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    dst = draw_root(ctx)
    return (ctx.randn(m, n), dst)


def golden(inputs, world_size):
    dst = inputs[0][1]
    stacked = torch.stack([args[0] for args in inputs])
    return [stacked if rank == dst else None for rank in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests gather_perf: S is the root's whole receive buffer (W chunks of M x N), bus factor (n-1)/n,
    # i.e. bus bytes are the W-1 chunks the root must receive from the other ranks.
    size = world_size * dims["M"] * dims["N"] * elem_bytes
    return Traffic("gather", size, (world_size - 1) * size // world_size)


SPEC = primitive(
    name="gather",
    title="Gather to one rank",
    description="Every rank holds an (M, N) tensor and the same root rank `dst`; rank dst must return the "
                "(W, M, N) stack of all ranks' tensors in rank order and every other rank must return None.",
    origin="NCCL/torch.distributed gather",
    pkb_id=6,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    bench_note="2 MiB in per rank",
    tolerances=EXACT_TOLERANCES,
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank; "
               "dst: Python int in [0, W), the same on every rank, drawn per trial",
    outputs_doc="rank dst: (W, M, N), same dtype, out[j] is rank j's tensor; every other rank: None",
)
