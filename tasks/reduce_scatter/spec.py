"""reduce_scatter: the element-wise sum over ranks, row block r returned on rank r (PKB problem 7)."""
import torch

from pkb_env.task import InputContext, Preset, TaskSpec, Tolerance, Traffic, WorldSizes


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    return (ctx.randn(ctx.world_size * m, n),)


def golden(inputs, world_size):
    total = torch.stack([args[0].double() for args in inputs]).sum(0).to(inputs[0][0].dtype)
    return [block.clone() for block in total.chunk(world_size, dim=0)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests: S is the whole input buffer of one rank (W blocks of M x N), bus factor (n-1)/n.
    size = world_size * dims["M"] * dims["N"] * elem_bytes
    return Traffic("reduce_scatter", size, (world_size - 1) * size // world_size)


SPEC = TaskSpec(
    name="reduce_scatter",
    title="Reduce-scatter (sum)",
    description="Every rank holds a (W*M, N) tensor; rank r must return the element-wise sum over all ranks "
                "of rows [r*M, (r+1)*M).",
    family="collective",
    parallelism="collective primitive",
    origin="NCCL/torch.distributed reduce_scatter_tensor",
    pkb_id=7,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    presets={"tiny": Preset({"M": 64, "N": 64}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's default size, 2 MiB out per rank")},
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
    inputs_doc="tensor: (W*M, N) standard-normal values, different on every rank",
    outputs_doc="(M, N), same dtype: on rank r, the sum over ranks of rows [r*M, (r+1)*M)",
)
