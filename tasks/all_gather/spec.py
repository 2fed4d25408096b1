"""all_gather: every rank's tensor, stacked in rank order, returned on every rank (PKB problem 2)."""
import torch

from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import EXACT_TOLERANCES, primitive


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    return (ctx.randn(m, n),)


def golden(inputs, world_size):
    stacked = torch.stack([args[0] for args in inputs])
    return [stacked.clone() for _ in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the whole output buffer of one rank (W chunks of M x N), bus factor (n-1)/n.
    size = world_size * dims["M"] * dims["N"] * elem_bytes
    return Traffic("all_gather", size, (world_size - 1) * size // world_size)


SPEC = primitive(
    name="all_gather",
    title="All-gather",
    description="Every rank holds an (M, N) tensor; every rank must return the (W, M, N) stack of all ranks' "
                "tensors in rank order.",
    origin="NCCL/torch.distributed all_gather_into_tensor",
    pkb_id=2,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    bench_note="2 MiB in per rank",
    tolerances=EXACT_TOLERANCES,
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank",
    outputs_doc="(W, M, N), same dtype: out[j] is rank j's tensor, identical on every rank",
)
