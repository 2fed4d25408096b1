"""broadcast: the root's tensor, returned on every rank; the root changes per trial (PKB problem 3)."""
from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import EXACT_TOLERANCES, draw_root, primitive


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    src = draw_root(ctx)
    return (ctx.randn(m, n), src)


def golden(inputs, world_size):
    src = inputs[0][1]
    return [inputs[src][0].clone() for _ in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the broadcast buffer, bus factor 1 (the root sends S, every other rank receives S).
    size = dims["M"] * dims["N"] * elem_bytes
    return Traffic("broadcast", size, size)


SPEC = primitive(
    name="broadcast",
    title="Broadcast",
    description="Every rank holds an (M, N) tensor and the same root rank `src`; every rank must return "
                "rank src's tensor. The other ranks' tensors hold unrelated values and must be ignored.",
    origin="NCCL/torch.distributed broadcast",
    pkb_id=3,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    tolerances=EXACT_TOLERANCES,
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank; "
               "src: Python int in [0, W), the same on every rank, drawn per trial",
    outputs_doc="(M, N), same dtype: rank src's tensor, identical on every rank",
)
