"""all_reduce: the element-wise sum over ranks, returned on every rank (PKB problem 1)."""
import torch

from pkb_env.task import InputContext, Preset, TaskSpec, Tolerance, Traffic, WorldSizes


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    return (ctx.randn(m, n),)


def golden(inputs, world_size):
    total = torch.stack([args[0].double() for args in inputs]).sum(0)
    return [total.to(inputs[0][0].dtype) for _ in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    size = dims["M"] * dims["N"] * elem_bytes
    return Traffic("all_reduce", size, 2 * (world_size - 1) * size // world_size)


SPEC = TaskSpec(
    name="all_reduce",
    title="All-reduce (sum)",
    description="Every rank holds a tensor of the same shape; every rank must return the element-wise "
                "sum of all ranks' tensors.",
    family="collective",
    parallelism="collective primitive",
    origin="NCCL/torch.distributed all_reduce",
    pkb_id=1,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    presets={"tiny": Preset({"M": 64, "N": 64}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's default size, 2 MiB")},
    dtypes=("float32", "bfloat16", "float16"),
    tolerances={
        "float32": Tolerance(1e-5, 1e-5, "summation order differs between algorithms (ring, tree, one-shot)"),
        "bfloat16": Tolerance(1e-1, 3e-2, "bf16 partial sums rounded at each hop (2^-8 relative each); "
                              "partial sums can exceed the final sum, hence the absolute term"),
        "float16": Tolerance(1.5e-2, 5e-3, "fp16 partial sums rounded at each hop (2^-11 relative each)"),
    },
    world_sizes=WorldSizes(minimum=1),
    inputs_doc="tensor: (M, N) standard-normal values, different on every rank",
    outputs_doc="(M, N), same dtype: the sum over ranks, identical on every rank",
)
