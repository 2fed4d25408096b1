"""broadcast: the root's tensor, returned on every rank; the root changes per trial (PKB problem 3)."""
from pkb_env.task import EXACT, InputContext, Preset, TaskSpec, Traffic, WorldSizes


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    src = int(ctx.randint(0, ctx.world_size, shared=True))
    return (ctx.randn(m, n), src)


def golden(inputs, world_size):
    src = inputs[0][1]
    return [inputs[src][0].clone() for _ in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the broadcast buffer, bus factor 1 (the root sends S, every other rank receives S).
    size = dims["M"] * dims["N"] * elem_bytes
    return Traffic("broadcast", size, size)


SPEC = TaskSpec(
    name="broadcast",
    title="Broadcast",
    description="Every rank holds an (M, N) tensor and the same root rank `src`; every rank must return "
                "rank src's tensor. The other ranks' tensors hold unrelated values and must be ignored.",
    family="collective",
    parallelism="collective primitive",
    origin="NCCL/torch.distributed broadcast",
    pkb_id=3,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    presets={"tiny": Preset({"M": 64, "N": 64}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's default size, 2 MiB")},
    dtypes=("float32", "bfloat16", "float16"),
    tolerances={"float32": EXACT, "bfloat16": EXACT, "float16": EXACT},
    world_sizes=WorldSizes(minimum=1),
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank; "
               "src: Python int in [0, W), the same on every rank, drawn per trial",
    outputs_doc="(M, N), same dtype: rank src's tensor, identical on every rank",
)
