"""all_reduce: the element-wise sum over ranks, returned on every rank (PKB problem 1)."""
from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import SUM_TOLERANCES, primitive, rank_sum


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    return (ctx.randn(m, n),)


def golden(inputs, world_size):
    total = rank_sum([args[0] for args in inputs])
    return [total.clone() for _ in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the reduced buffer, bus factor 2(n-1)/n (a reduce-scatter then an all-gather).
    size = dims["M"] * dims["N"] * elem_bytes
    return Traffic("all_reduce", size, 2 * (world_size - 1) * size // world_size)


SPEC = primitive(
    name="all_reduce",
    title="All-reduce (sum)",
    description="Every rank holds a tensor of the same shape; every rank must return the element-wise "
                "sum of all ranks' tensors.",
    origin="NCCL/torch.distributed all_reduce",
    pkb_id=1,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    tolerances=SUM_TOLERANCES,
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank",
    outputs_doc="(M, N), same dtype: the sum over ranks, identical on every rank",
)
