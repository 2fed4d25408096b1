"""blocked_fp8_quantize: blockwise FP8 quantisation of activations, then an all-gather (PKB 19).

DeepSeek-V3's act_quant (a scale per 128 consecutive values of a row, values stored as float8_e4m3fn)
ahead of a GEMM whose input is gathered from every rank: quantising before the gather moves about half
the bytes of a bf16 gather. The levers: one kernel that quantises and writes the bytes straight into
every peer's output (y and s together), instead of a quantise pass and two NCCL gathers.
"""
import torch

from pkb_env.contract import (Clause, Comm, Compute, Const, Cost, Edge, Output, Preset, Replicated, Sharded, TaskSpec,
                              Tensor, Ulps)
from pkb_env.tasks._clauses import own_blocks

FP8_MAX = 448.0  # float8_e4m3fn's largest finite value
BLOCK = 128      # values per scale (the block_size Const)


def zero_block(x, draw):
    """The statement's guard: one block of BLOCK values of one row set to zero, on the rank it lands on
    (standard-normal rows never hold one, so a candidate dividing by a zero scale passed every trial)."""
    row = int(torch.randint(x.shape[0], (), generator=draw.gen, device=draw.gen.device))
    block = int(torch.randint(x.shape[1] // BLOCK, (), generator=draw.gen, device=draw.gen.device))
    if not draw.here:
        return x
    x = x.clone()
    x[row, block * BLOCK:(block + 1) * BLOCK] = 0
    return x


def golden(inputs, world):
    """Every rank's rows quantised in float64 (scale amax / 448, rounded once to fp32; values x / scale,
    rounded once to fp8), on every rank."""
    block = inputs[0]["block_size"]
    x = world.assemble(inputs, "x").double().unflatten(-1, (-1, block))
    scale = x.abs().amax(dim=-1) / FP8_MAX
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    y = (x / divisor.unsqueeze(-1)).to(torch.float8_e4m3fn).flatten(-2)
    return list(zip(world.distribute(y, "y"), world.distribute(scale.float(), "s")))


def cost(c):
    """Per rank: one all-gather of the fp8 values and the fp32 scales (S = both outputs; they can travel
    together); about 3 FLOPs an element (abs-max, divide, convert); input read once, outputs written."""
    block = c["M"] * c["N"]
    return Cost(comm=(Comm("all_gather", c.nbytes("y") + c.nbytes("s")),),
                compute=(Compute(3 * block, "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="blocked_fp8_quantize",
    title="Blockwise FP8 quantisation + all-gather (DeepSeek-V3 act_quant)",
    description="Every rank holds x (M, N), rows [r*M, (r+1)*M) of the activations (W*M, N). For every run of "
                "block_size consecutive values of a row: s = max(abs(x)) / 448 (fp32) and y = x / s as "
                "float8_e4m3fn (an all-zero block keeps s = 0 and y = 0). Every rank must return (y, s) for "
                "all rows of all ranks: y (W*M, N) float8_e4m3fn, s (W*M, N/block_size) float32.",
    family="tensor",
    parallelism="tensor parallel: quantised all-gather of activations ahead of a GEMM",
    pkb_id=19,
    origin="DeepSeek-V3 inference kernel.py act_quant (block 128, float8_e4m3fn, scale = amax / 448)",
    inputs=(
        Tensor("x", ("W * M", "N"), layout=Sharded(0), doc="this rank's rows of the activations"),
        Const("block_size", BLOCK, doc="values per scale along each row"),
    ),
    outputs=(
        Output("y", ("W * M", "N"), dtype="float8_e4m3fn", layout=Replicated(),
               tolerance=Ulps(1, "float8_e4m3fn", what="quantised values"), doc="the quantised rows, rank order"),
        Output("s", ("W * M", "N / 128"), dtype="float32", layout=Replicated(),
               tolerance=Ulps(2, "float32", what="scales"), doc="one scale per block"),
    ),
    golden=golden,
    cost=cost,
    # Quantised values: x / s lands within a rounding of the task dtype of the exact quotient, which can
    # cross an fp8 rounding midpoint: one fp8 step. Scales: amax / 448 or amax * (1/448), two fp32 steps.
    tolerance_rule=Ulps(1, "float8_e4m3fn", what="quantised values"),
    clauses=(Clause("zero_scale", "an all-zero block keeps s = 0 and y = 0 (no division by zero)", lambda t: any(
        bool((x.float().unflatten(-1, (-1, BLOCK)).abs().amax(dim=-1) == 0).any()) for x in t.each("x")),
        "edge case zero_block", edge="zero_block"),
             own_blocks("x", what="every rank's rows are quantised and gathered")),
    presets={
        "tiny": Preset({"M": 4, "N": 256}, "float32", "CPU ranks, milliseconds (two blocks a row)"),
        "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's shapes: x (1024, 1024) per rank"),
        "large": Preset({"M": 4096, "N": 7168}, "bfloat16",
                        "4096 tokens per rank of DeepSeek-V3's hidden size 7168: 28 MiB of fp8 per rank to "
                        "gather"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    edges=(Edge("zero_block", "x", zero_block, "an all-zero block"),),
    departures=(
        "the reference is torch, not a Triton kernel, so that it runs on CPU ranks; it computes the same "
        "scales and values",
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to quantise its peers' rows without communicating)",
        "x is declared as this rank's rows of the global activations, which is what PKB's per-rank x means",
        "a `large` preset (4096 tokens of 7168 per rank) where the gathered bytes set the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("blocked_fp8_quantize", params=(Arg("local_tensor", "x"), Arg("block_size")),
          needs="Triton: PKB's reference quantizes with a Triton kernel")
