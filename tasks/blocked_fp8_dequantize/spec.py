"""blocked_fp8_dequantize: blockwise FP8 dequantisation, then an all-to-all (PKB 20).

DeepSeek-V3's weight_dequant (values in float8_e4m3fn, one fp32 scale per 128 values) where the
dequantised chunks are exchanged between ranks. The reference dequantises first and ships 2 or 4 bytes
a value; shipping the fp8 bytes and the scales (1 + 4/128 bytes a value) and dequantising on arrival
moves half to a quarter of the data. The lever is exactly that, fused into one kernel that reads peers'
fp8 chunks and writes the dequantised result.
"""
import torch

from pkb_env.contract import (Comm, Compute, Const, Cost, Output, PerRank, Positive, Preset, TaskSpec, Tensor, Ulps,
                              Uniform)
from pkb_env.tasks._clauses import own_blocks

BLOCK = 128


def golden(inputs, world):
    """Rank r's row j is rank j's chunk r, dequantised in float64 (exact: an fp8 value times an fp32
    scale fits in a double) and rounded once to the task dtype."""
    dtype, block = inputs[0]["out_dtype"], inputs[0]["block_size"]
    chunks = [(x["y"].double().reshape(x["y"].shape[0], -1, block) * x["s"].double().unsqueeze(-1)).to(dtype)
              .reshape(x["y"].shape) for x in inputs]
    return [torch.stack([chunks[j][r] for j in range(world.world_size)]) for r in range(world.world_size)]


def cost(c):
    """Per rank: an all-to-all, of the cheaper of the dequantised chunks (the task dtype) or the fp8 values
    with their scales (dequantised where they land); one multiply a value; inputs read, output written."""
    values = c["W"] * c["M"] * c["N"]
    dequantised = (Comm("all_to_all", values * c.elem),)
    quantised = (Comm("all_to_all", values * 1 + values // BLOCK * 4),)
    return Cost(comm=c.cheapest(dequantised, quantised), compute=(Compute(values, "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="blocked_fp8_dequantize",
    title="Blockwise FP8 dequantisation + all-to-all (DeepSeek-V3 weight_dequant)",
    description="Every rank holds y (W, M, N) float8_e4m3fn, W chunks of quantised values (chunk j meant for "
                "rank j), and s (W, M*N/block_size) float32, one scale per run of block_size consecutive "
                "values of a chunk in row-major order. Rank r must return (W, M, N) in the task dtype "
                "(out_dtype): row j is rank j's chunk r, each value times its block's scale.",
    family="tensor",
    parallelism="quantised exchange: dequantise, then all-to-all (or all-to-all fp8, then dequantise)",
    pkb_id=20,
    origin="DeepSeek-V3 inference kernel.py weight_dequant (block 128, float8_e4m3fn values, fp32 scales)",
    inputs=(
        Tensor("y", ("W", "M", "N"), dtype="float8_e4m3fn", dist=Uniform(-448.0, 448.0),
               doc="chunk j for rank j; every float8_e4m3fn magnitude up to its largest, 448"),
        Tensor("s", ("W", "M * N / 128"), dtype="float32", dist=Positive(0.01), doc="one scale per 128 values"),
        Const("block_size", BLOCK, doc="values per scale"),
        Const("out_dtype", task_dtype=True, doc="the dtype of the result"),
    ),
    outputs=(Output("out", ("W", "M", "N"), layout=PerRank(), doc="row j: rank j's chunk for this rank"),),
    golden=golden,
    cost=cost,
    # One product of an fp8 value and an fp32 scale (exact in fp32 up to its last bit), rounded to the
    # dtype: the reference rounds to fp32 first, then to the dtype (a double rounding), so up to two steps.
    tolerance_rule=Ulps(2, what="dequantised values"),
    clauses=(own_blocks("y", "s", what="chunk j of every rank is rank j's"),),
    presets={
        "tiny": Preset({"M": 2, "N": 128}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's shapes: y (W, 1024, 1024) per rank"),
        "large": Preset({"M": 2048, "N": 7168}, "bfloat16",
                        "chunks of 2048 rows of DeepSeek-V3's 7168: up to 117 MiB of fp8 per rank to exchange"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "y is float8_e4m3fn and s are positive scales: PKB feeds y as random values of the task dtype "
        "(not fp8) and s as standard normals (half of them negative), so nothing is dequantised",
        "the result is in the task dtype: float32 is PKB's output; bfloat16 is what DeepSeek-V3's "
        "weight_dequant returns; a Const out_dtype tells the reference which",
        "the reference is torch, not a Triton kernel, so that it runs on CPU ranks",
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial)",
        "a `large` preset (chunks of 2048 x 7168) where the exchanged bytes set the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb, Ret  # noqa: E402  (kept apart from the task's own)


def _pkb_out_dtype(out, call):
    """PKB returns float32; this task returns out_dtype (the task dtype)."""
    return out.to(call.values["out_dtype"])


PKB = Pkb("blocked_fp8_dequantize", params=(Arg("local_y", "y"), Arg("local_s", "s"), Arg("block_size")),
          returns=(Ret("out", fn=_pkb_out_dtype, text="cast to out_dtype (PKB returns float32)"),),
          needs="Triton: PKB's reference dequantizes with a Triton kernel")
