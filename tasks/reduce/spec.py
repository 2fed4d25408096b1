"""reduce: the element-wise sum over ranks, returned on one root rank only (PKB problem 4)."""
from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import SUM_TOLERANCES, draw_root, primitive, rank_sum


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    dst = draw_root(ctx)
    return (ctx.randn(m, n), dst)


def golden(inputs, world_size):
    dst = inputs[0][1]
    total = rank_sum([args[0] for args in inputs])
    return [total if rank == dst else None for rank in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the reduced buffer, bus factor 1 (every rank sends S, the root receives S).
    size = dims["M"] * dims["N"] * elem_bytes
    return Traffic("reduce", size, size)


SPEC = primitive(
    name="reduce",
    title="Reduce (sum) to one rank",
    description="Every rank holds an (M, N) tensor and the same root rank `dst`; rank dst must return the "
                "element-wise sum of all ranks' tensors and every other rank must return None.",
    origin="NCCL/torch.distributed reduce",
    pkb_id=4,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    tolerances=SUM_TOLERANCES,
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank; "
               "dst: Python int in [0, W), the same on every rank, drawn per trial",
    outputs_doc="rank dst: (M, N), same dtype, the sum over ranks; every other rank: None",
)
