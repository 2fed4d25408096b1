"""reduce: the element-wise sum over ranks, returned on one root rank only (PKB problem 4)."""
import torch

from pkb_env.task import InputContext, Preset, TaskSpec, Tolerance, Traffic, WorldSizes


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    dst = int(ctx.randint(0, ctx.world_size, shared=True))
    return (ctx.randn(m, n), dst)


def golden(inputs, world_size):
    dst = inputs[0][1]
    total = torch.stack([args[0].double() for args in inputs]).sum(0).to(inputs[0][0].dtype)
    return [total if rank == dst else None for rank in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the reduced buffer, bus factor 1 (every rank sends S, the root receives S).
    size = dims["M"] * dims["N"] * elem_bytes
    return Traffic("reduce", size, size)


SPEC = TaskSpec(
    name="reduce",
    title="Reduce (sum) to one rank",
    description="Every rank holds an (M, N) tensor and the same root rank `dst`; rank dst must return the "
                "element-wise sum of all ranks' tensors and every other rank must return None.",
    family="collective",
    parallelism="collective primitive",
    origin="NCCL/torch.distributed reduce",
    pkb_id=4,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    presets={"tiny": Preset({"M": 64, "N": 64}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's default size, 2 MiB")},
    dtypes=("float32", "bfloat16", "float16"),
    tolerances={
        "float32": Tolerance(1e-5, 1e-5, "summation order differs between algorithms"),
        # Each hop rounds the partial sum, which is larger than the final sum when ranks cancel: ring and tree
        # orders at 8 ranks over 8M N(0,1) elements needed atol 0.052 (bf16) and 0.0065 (fp16) beside the
        # rtol; the atols below leave about 2x room for world sizes up to 8.
        "bfloat16": Tolerance(1e-1, 3e-2, "bf16 partial sums rounded at each of up to W-1 hops, 2^-8 "
                                          "relative to the partial sum, which can exceed the final sum"),
        "float16": Tolerance(1.5e-2, 5e-3, "fp16 partial sums rounded at each of up to W-1 hops, 2^-11 "
                                           "relative to the partial sum, which can exceed the final sum"),
    },
    world_sizes=WorldSizes(minimum=1),
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank; "
               "dst: Python int in [0, W), the same on every rank, drawn per trial",
    outputs_doc="rank dst: (M, N), same dtype, the sum over ranks; every other rank: None",
)
