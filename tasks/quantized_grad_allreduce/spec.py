"""quantized_grad_allreduce: data-parallel gradient averaging through blockwise int8 codes (PKB 44).

Gradient compression for data parallelism (the pattern of ZeRO++'s quantised gradients): every rank
quantises its gradient in blocks of 128 values with one fp32 scale each, and the ranks average what the
codes say. The reference all-reduces the dequantised values in fp32, four bytes an element; the codes
and scales are about one. The lever: ship int8 codes and scales (an all-to-all of the codes, a local
fp32 sum of the dequantised blocks, an all-gather of the mean), and fuse the quantisation into it.

What "correct" is. The quantisation is part of the statement, not an approximation to undo: the codes and
scales are a function of each rank's gradient, defined in fp32 (s = max(amax, 1e-8) / 127, q = the fp32
quotient x / s rounded half to even, clamped to +-127), and the output is the mean over ranks of q * s. The
golden computes the codes and scales with that fp32 arithmetic, exactly as defined (so its codes are
the reference's), then dequantises, sums and divides in float64 and rounds once. The tolerance covers
only how the dequantised values are summed; a code that differs from the definition (a reciprocal
multiply instead of the division, an approximate division, round half away from zero) moves an element by
a whole quantisation step, s / W, far outside it, and so does skipping the quantisation.
"""
import torch

from pkb_env.contract import (Comm, Compute, Const, Cost, Edge, Output, Preset, Relative, Replicated, Sum, TaskSpec,
                              Tensor)

BLOCK = 128       # values per scale (the block_size Const)
INT8_MAX = 127.0  # the largest code
AMAX_FLOOR = 1e-8  # an all-zero block keeps a tiny positive scale (its codes are all zero)


def quantize(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The statement's codes (int8 values as float64) and scales (fp32 values as float64) of one rank's
    gradient, blocks along the last axis; computed in fp32, as defined."""
    blocks = x.float().view(-1, block)
    scale = blocks.abs().amax(dim=1, keepdim=True).clamp(min=AMAX_FLOOR) / INT8_MAX
    codes = (blocks / scale).round().clamp(-INT8_MAX, INT8_MAX)
    return codes.double(), scale.double()


def zero_block(x, draw):
    """The statement's floor: one block of BLOCK values set to zero on the rank it lands on (normal
    gradients never hold one, so a candidate dividing by a zero amax would pass every trial)."""
    block = int(torch.randint(x.shape[0] // BLOCK, (), generator=draw.gen, device=draw.gen.device))
    if not draw.here:
        return x
    x = x.clone()
    x[block * BLOCK:(block + 1) * BLOCK] = 0
    return x


def golden(inputs, world):
    """Each rank's codes and scales as defined (fp32), dequantised and averaged over ranks in float64,
    rounded once to the dtype; the same mean on every rank."""
    block = inputs[0]["block_size"]
    total = 0
    for args in inputs:
        codes, scale = quantize(args["flat_grad"], block)
        total = total + (codes * scale).flatten()
    mean = total / world.world_size
    return world.distribute(mean.to(inputs[0]["flat_grad"].dtype), "out")


def cost(c):
    """Per rank, the cheaper of: all-gather every rank's codes and scales (n bytes + 4 per block each) and
    reduce locally; or an all-to-all of the codes and scales (each rank gets its 1/W of every rank's), a
    local fp32 sum, and an all-gather of the mean in the dtype. About 6 FLOPs an element (abs-max,
    divide, round, multiply, add, scale); the gradient read and the mean written once."""
    n = c["blocks"] * BLOCK
    packed = n + 4 * c["blocks"]                    # int8 codes + fp32 scales of one rank's gradient
    gather_codes = (Comm("all_gather", c["W"] * packed),)
    exchange_then_gather = (Comm("all_to_all", packed), Comm("all_gather", n * c.elem))
    return Cost(comm=c.cheapest(gather_codes, exchange_then_gather), compute=(Compute(6 * n, "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="quantized_grad_allreduce",
    title="Blockwise int8 quantised gradient all-reduce (mean over ranks)",
    description="Every rank holds its own flat gradient flat_grad (blocks * 128,). Each run of block_size = "
                "128 consecutive values is quantised with the fp32 scale s = max(max(abs(x)), 1e-8) / 127 to the "
                "codes q = round(x / s), the fp32 quotient (IEEE division, as torch computes x / s) rounded half "
                "to even and clamped to [-127, 127]. Every rank must return the mean over ranks of the "
                "dequantised values q * s, in flat_grad's dtype and shape. The codes and scales are part of "
                "the statement: compute them exactly as defined, in fp32 (a reciprocal multiply or an "
                "approximate division changes some codes by one, a whole quantisation step); the dequantised "
                "values may be summed in any order, in fp32 or wider.",
    family="data",
    parallelism="data parallel: gradient all-reduce with blockwise int8 compression",
    pkb_id=44,
    origin="blockwise int8 gradient compression for data-parallel averaging (the pattern of ZeRO++'s quantised "
           "gradients, qgZ, here as one all-reduce of the dequantised values)",
    inputs=(
        Tensor("flat_grad", ("blocks * 128",), doc="this rank's flattened gradient"),
        Const("block_size", BLOCK, doc="values per scale"),
    ),
    outputs=(Output("out", ("blocks * 128",), layout=Replicated(),
                    doc="the mean over ranks of the dequantised gradients"),),
    golden=golden,
    cost=cost,
    # The codes are defined exactly, so only the sum of dequantised values rounds: W terms up to ~4 (the
    # tails of 128 normals) added in fp32, divided by W; then the fp32 mean is rounded again to the dtype,
    # which can land one step from the correctly rounded value (Relative 1 keeps the reference's double
    # rounding under half the allowance).
    tolerance_rule=(Sum("W", 4, "float32", what="the fp32 sum of the W ranks' dequantised values")
                    + Relative(1, "dtype", what="the fp32 mean rounded again to the dtype")),
    presets={
        "tiny": Preset({"blocks": 16}, "float32", "CPU ranks, milliseconds (2048 values a rank)"),
        "bench": Preset({"blocks": 8192}, "bfloat16", "PKB's size: 1M gradient values a rank (M * N)"),
        "large": Preset({"blocks": 65536}, "bfloat16",
                        "8M values a rank (16 MiB of bf16 gradient, a DDP bucket's order): bandwidth-bound on "
                        "NVLink"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    edges=(Edge("zero_block", "flat_grad", zero_block, "an all-zero block"),),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to quantise its peers' gradients without communicating)",
        "the length is declared as a whole number of 128-value blocks (PKB pads a ragged last block; its "
        "sizes never need it) and block_size is fixed at 128, PKB's value at its default size",
        "the statement defines the codes exactly (fp32 division, round half to even) and the golden computes "
        "them the same way, then averages in float64, so the output is one function of the inputs (PKB "
        "leaves the arithmetic to its reference's code and compares everything at 1e-2)",
        "an edge case: one all-zero block in one call of two, where PKB's 1e-8 floor on the block's "
        "maximum decides the result",
        "a `large` preset (8M values a rank) where the bytes moved set the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('quantized_grad_allreduce')
