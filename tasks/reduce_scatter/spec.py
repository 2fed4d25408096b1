"""reduce_scatter: the element-wise sum over ranks, row block r returned on rank r (PKB problem 7)."""
from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import SUM_TOLERANCES, primitive, rank_sum


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    return (ctx.randn(ctx.world_size * m, n),)


def golden(inputs, world_size):
    total = rank_sum([args[0] for args in inputs])
    return [block.clone() for block in total.chunk(world_size, dim=0)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the whole input buffer of one rank (W blocks of M x N), bus factor (n-1)/n.
    size = world_size * dims["M"] * dims["N"] * elem_bytes
    return Traffic("reduce_scatter", size, (world_size - 1) * size // world_size)


SPEC = primitive(
    name="reduce_scatter",
    title="Reduce-scatter (sum)",
    description="Every rank holds a (W*M, N) tensor; rank r must return the element-wise sum over all ranks "
                "of rows [r*M, (r+1)*M).",
    origin="NCCL/torch.distributed reduce_scatter_tensor",
    pkb_id=7,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    bench_note="2 MiB out per rank",
    tolerances=SUM_TOLERANCES,
    inputs_doc="tensor: (W*M, N) standard-normal values, different on every rank",
    outputs_doc="(M, N), same dtype: on rank r, the sum over ranks of rows [r*M, (r+1)*M)",
)
