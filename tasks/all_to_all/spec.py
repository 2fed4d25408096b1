"""all_to_all: chunk r of every rank delivered to rank r, in source-rank order (PKB problem 8)."""
import torch

from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import EXACT_TOLERANCES, primitive


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    return (ctx.randn(ctx.world_size, m, n),)


def golden(inputs, world_size):
    return [torch.stack([inputs[src][0][rank] for src in range(world_size)]) for rank in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the whole send buffer of one rank (W chunks of M x N, own chunk included),
    # bus factor (n-1)/n.
    size = world_size * dims["M"] * dims["N"] * elem_bytes
    return Traffic("all_to_all", size, (world_size - 1) * size // world_size)


SPEC = primitive(
    name="all_to_all",
    title="All-to-all",
    description="Every rank holds a (W, M, N) tensor whose chunk j is addressed to rank j; rank r must "
                "return the (W, M, N) tensor whose chunk j is rank j's chunk r.",
    origin="NCCL/torch.distributed all_to_all_single",
    pkb_id=8,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    bench_note="2 MiB per chunk",
    tolerances=EXACT_TOLERANCES,
    inputs_doc="tensor: (W, M, N) standard-normal values, different on every rank; chunk j goes to rank j",
    outputs_doc="(W, M, N), same dtype: on rank r, out[j] is rank j's tensor[r]",
)
