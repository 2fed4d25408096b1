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
from functools import lru_cache

import torch

from pkb_env.contract import (Clause, Comm, Compute, Const, Cost, Edge, Output, Preset, Relative, Replicated, Sum,
                              TaskSpec, Tensor)

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


# -- values on the codes' rounding boundaries -------------------------------------------------------------
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
SCALE = 2.0 ** -5   # the boundary blocks' maxima lie in [4, 8): a gradient's outliers (exact: a power of two)


def _quotients(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per value of (n, BLOCK) fp32 blocks: the stated quotient x / s, and x * (127 / amax) and x * (1 / s),
    the reciprocal multiplies a candidate may use instead (all fp32)."""
    amax = blocks.abs().amax(dim=1, keepdim=True).clamp(min=AMAX_FLOOR)
    scale = amax / INT8_MAX
    return blocks / scale, blocks * (INT8_MAX / amax), blocks * (1.0 / scale)


@lru_cache(maxsize=None)
def _reciprocal_block(dtype: torch.dtype) -> tuple[float, tuple[float, ...]]:
    """A block maximum in [128, 256) of `dtype`'s grid and the values of that grid below it whose code the
    stated division rounds otherwise than a reciprocal multiply does (their quotient within an ulp of k + 1/2):
    the maximum with the most such values (16-bit grids hold a few; float32's many). Searched once per dtype:
    the grid's values next to (k + 1/2) s for every code k."""
    bits = BITS[dtype]
    low, high = (int(torch.tensor(v, dtype=dtype).view(bits)) for v in (128.0, 256.0))
    step = max(1, (high - low) // 1024)
    amax = torch.arange(low, high, step, dtype=bits).view(dtype).float()
    near = ((torch.arange(127.0)[None] + 0.5) * (amax[:, None] / INT8_MAX)).to(dtype)
    x = (near.view(bits)[..., None] + torch.arange(-3, 4, dtype=bits)).view(dtype).float().flatten(1)
    exact, whole, each = _quotients(torch.cat([amax[:, None], x], dim=1))
    differs = ((exact.round() != whole.round()) | (exact.round() != each.round()))[:, 1:] & (x < amax[:, None])
    differs &= (exact.round() != whole.round())[:, 1:].any(dim=1, keepdim=True)   # the 127 / amax kind present
    best = int(differs.sum(dim=1).argmax())
    return float(amax[best]), tuple(sorted(set(x[best][differs[best]].tolist())))


def rounding_boundary(x, draw):
    """On the rank it lands on, two blocks whose codes the stated arithmetic decides: in one, amax = 127 2^-5
    (so s = 2^-5) and values (k + 1/2) s: quotients exactly half-way, where rounding half to even and half away
    from zero differ for even k; in the other, a maximum whose grid holds values with quotients within an ulp of
    a half, which a reciprocal multiply (x * (127 / amax) or x * (1 / s)) rounds the other way. Each block's
    other values stay below its maximum. Normal gradients hold such values in about 1 call in 200 (issue 42:
    a reciprocal multiply was caught in 15 of 32 steps)."""
    blocks = x.shape[0] // BLOCK
    ties, near = (int(b) for b in torch.randperm(blocks, generator=draw.gen, device=draw.gen.device)[:2])
    signs = torch.randint(0, 2, (2, BLOCK), generator=draw.gen, device=draw.gen.device).cpu() * 2 - 1
    if not draw.here:
        return x
    top, values = _reciprocal_block(x.dtype)
    x = x.clone()
    for block, amax, special in ((ties, INT8_MAX, [k + 0.5 for k in range(0, 126, 2)]), (near, top, list(values))):
        row = x[block * BLOCK:(block + 1) * BLOCK].float().clamp(-amax * SCALE / 2, amax * SCALE / 2)
        row[0] = amax * SCALE
        # exact (a power of two), and on the rank's device, as its twin in tasks/_delayed_fp8.py must be
        chosen = torch.tensor(special[:BLOCK - 1], dtype=torch.float32, device=row.device) * SCALE
        row[1:1 + len(chosen)] = chosen
        x[block * BLOCK:(block + 1) * BLOCK] = (row * signs[int(block == near)].to(row.device)).to(x.dtype)
    return x


def _blocks(trial):
    return torch.cat([a["flat_grad"].float().view(-1, BLOCK) for a in trial.inputs])


def half_to_even(trial) -> bool:
    """A quotient exactly half-way between two codes, the lower even: round half to even and round half away
    from zero differ."""
    exact = _quotients(_blocks(trial))[0].abs()
    return bool(((exact - exact.floor() == 0.5) & (exact.floor() % 2 == 0)).any())


def stated_division(trial) -> bool:
    """A value whose code the fp32 division x / s rounds otherwise than x * (127 / amax)."""
    exact, whole, _ = _quotients(_blocks(trial))
    return bool((exact.round() != whole.round()).any())


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
    edges=(Edge("zero_block", "flat_grad", zero_block, "an all-zero block"),
           Edge("rounding_boundary", "flat_grad", rounding_boundary, "blocks with values on their codes' rounding "
                "boundaries")),
    clauses=(
        Clause("amax_floor", "an all-zero block: s = 1e-8 / 127, codes 0 (no division by zero)",
               lambda t: bool((_blocks(t).abs().amax(dim=1) == 0).any()), "edge case zero_block", edge="zero_block"),
        Clause("half_to_even", "q = x / s rounded half to even: a quotient exactly half-way between codes, the "
               "lower even", half_to_even, "edge case rounding_boundary (a block with amax = 127 s, s = 2^-5, and "
               "values (k + 1/2) s)", edge="rounding_boundary"),
        Clause("fp32_division", "q from the fp32 quotient x / s (IEEE division): a value whose quotient lies "
               "within an ulp of a half, where x * (127 / amax) rounds the other way", stated_division,
               "edge case rounding_boundary (a block whose maximum's grid holds such values, searched per dtype)",
               edge="rounding_boundary"),
    ),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to quantise its peers' gradients without communicating)",
        "the length is declared as a whole number of 128-value blocks (PKB pads a ragged last block; its "
        "sizes never need it) and block_size is fixed at 128, PKB's value at its default size",
        "the statement defines the codes exactly (fp32 division, round half to even) and the golden computes "
        "them the same way, then averages in float64, so the output is one function of the inputs (PKB "
        "leaves the arithmetic to its reference's code and compares everything at 1e-2)",
        "edge cases, each in every step's trials: an all-zero block, where PKB's 1e-8 floor on the block's "
        "maximum decides the result, and blocks whose values sit on their codes' rounding boundaries, where the "
        "stated fp32 division and rounding half to even decide them",
        "a `large` preset (8M values a rank) where the bytes moved set the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('quantized_grad_allreduce')
