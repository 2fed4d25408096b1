"""hyena_forward_cp: the Hyena operator's long FFT convolution over a sequence split across ranks in zigzag
order, with all-to-all context parallelism (PKB 72).

Hyena (Savanna / Evo 2) replaces attention with gated long convolutions: per channel, y = x1 * (h * (x2 *
v) + bias * x2 * v), with a causal filter h as long as the sequence, computed as an FFT convolution. Under
context parallelism each rank holds two zigzag chunks of the sequence; the convolution needs a channel's
whole sequence, so an all-to-all hands each rank a block of channels over every position and a second one
brings the output back. The reference ships x1, x2 and v; the levers are shipping only x2 * v out and the
convolution's result back (x1's gate applies in the sequence layout), overlapping the transfers with the
FFTs of the channels that have arrived, and fusing the gate, the product and the FFT's padding. PKB's blog
reports a 3.55x speed-up found by GPT-5.5 on this problem.
"""
import math

import torch

from pkb_env.contract import (Comm, Compute, Cost, Group, Normal, Output, PerRank, Preset, Propagated, Relative,
                              Replicated, Rounded, Sum, TaskSpec, Tensor, WorldSizes)
from pkb_env.tasks._conv import fan_in_normal
from pkb_env.tasks._clauses import own_blocks


def _sequence(inputs, world, name):
    """The global (B, D, 2W*T) sequence of an input from every rank's two zigzag chunks."""
    w = world.world_size
    chunks = [None] * (2 * w)
    for rank, args in enumerate(inputs):
        chunks[rank], chunks[2 * w - 1 - rank] = args[name].chunk(2, dim=-1)
    return torch.cat(chunks, dim=-1)


def golden(inputs, world):
    """The gated convolution of the whole sequence in float64 (z = x2 * v unrounded; an FFT of length 2S is
    the exact causal convolution), rounded once, cut back into each rank's zigzag chunks, positions first."""
    x1, x2, v = (_sequence(inputs, world, n).double() for n in ("x1", "x2", "v"))
    h = world.assemble(inputs, "h").double()
    bias = world.assemble(inputs, "bias").double()
    z = x2 * v
    length = z.shape[-1]
    conv = torch.fft.irfft(torch.fft.rfft(z, n=2 * length) * torch.fft.rfft(h, n=2 * length), n=2 * length)
    y = (x1 * (conv[..., :length] + z * bias.unsqueeze(-1))).to(inputs[0]["x1"].dtype)
    w = world.world_size
    pieces = y.chunk(2 * w, dim=-1)
    return [torch.cat([pieces[r], pieces[2 * w - 1 - r]], dim=-1).transpose(1, 2).contiguous() for r in range(w)]


def cost(c):
    """Per rank: two all-to-alls of one input's bytes (x2 * v out to the channels' owners, the convolution's
    result back; the gate x1 applies where the positions are), dependent; three real FFTs of 2S points per
    channel of its block (z, h and the inverse: 2.5 n log2 n FLOPs each) on CUDA cores; every input and
    output once in HBM."""
    s = 2 * c["W"] * c["T"]
    n = 2 * s
    return Cost(
        comm=(Comm("all_to_all", c.nbytes("x1"), steps=2),),
        compute=(Compute(c["B"] * c["D"] / c["W"] * 3 * 2.5 * n * math.log2(n), "vector"),),
        memory_bytes=c.io_bytes(),
    )


# The output is x1 * (h * z + bias z), z = x2 * v, of RMS about 1.2 (the filter has std 1/sqrt(S), so the
# convolution's RMS is below 1; bias and z are unit normals); x1 multiplies every error. Where rounding
# enters: z rounded to the dtype (a relative error u on each position), carried through S taps of std
# 1/sqrt(S) (errors add in quadrature: Propagated, times x1 up to ~4) and through bias z, which is most of
# the output where it is large (Relative) and, where the convolution cancels it, at most a few times the
# RMS (Rounded); the FFT convolution's log2(2S) stages in fp32 (Sum, in fp32); the bracket rounded to the
# dtype before the gate: a relative error of the output (Relative); the gate's product is the rtol's.
# A first rule of RMS terms alone (Rounded(2, 16)) allowed 0.63 in bf16, ~150 roundings: far too loose.
TOLERANCE = (Propagated("2 * W * T", "4 / sqrt(2 * W * T)", what="x2 * v rounded to the dtype, carried by S taps of "
                                                                 "std 1/sqrt(S), times the gate x1 (up to ~4)")
             + Rounded(1, 4, what="x2 * v's rounding carried by bias z where the convolution cancels it")
             + Relative(2, "dtype", what="x2 * v's rounding carried by bias z, and the bracket rounded to the "
                                         "dtype before the gate: relative errors of the output")
             + Sum("log2(4 * W * T)", 4, "float32", what="the FFT convolution's log2(2S) stages in fp32, times "
                                                         "x1"))

SPEC = TaskSpec(
    name="hyena_forward_cp",
    title="Hyena long FFT convolution, zigzag context parallel (all-to-all)",
    description="A sequence of S = 2W*T positions is cut into 2W chunks of T; rank r holds chunks r and 2W-1-r "
                "side by side of x1, x2 and v (B, D, 2T), and the whole filter h (D, S) and bias (D,). With z = "
                "x2 * v over the whole sequence, every rank must return, positions first, its two chunks "
                "(B, 2T, D) of y[b, t, d] = x1[b, d, t] * (sum_{s <= t} h[d, t - s] z[b, d, s] + bias[d] "
                "z[b, d, t]): a causal convolution of every channel over the whole sequence, gated.",
    family="context",
    parallelism="context parallel: zigzag sequence chunks, all-to-all to channel blocks for the FFT "
                "convolution and back",
    pkb_id=72,
    origin="Hyena operator (Savanna / Evo 2) with all-to-all context parallelism: FFT convolution of x2 * v, "
           "gated by x1",
    inputs=(
        Tensor("x1", ("B", "D", "2 * T"), layout=PerRank(), doc="the gate: chunks r and 2W-1-r, side by side"),
        Tensor("x2", ("B", "D", "2 * T"), layout=PerRank(), doc="the inner gate: chunks r and 2W-1-r"),
        Tensor("v", ("B", "D", "2 * T"), layout=PerRank(), doc="the values: chunks r and 2W-1-r"),
        Tensor("h", ("D", "2 * W * T"), dist=fan_in_normal("2 * W * T"), layout=Replicated(),
               doc="one causal filter per channel, as long as the sequence"),
        Tensor("bias", ("D",), dist=Normal(), layout=Replicated(), doc="one skip weight per channel"),
        Group("group", "world", doc="the context-parallel ranks, in zigzag order"),
    ),
    outputs=(Output("out", ("B", "2 * T", "D"), layout=PerRank(),
                    doc="y at this rank's two chunks, side by side, positions first"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("x1", "x2", "v", what="the convolution reads every earlier chunk"),),
    presets={
        "tiny": Preset({"B": 1, "D": 8, "T": 4}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 1, "D": 1024, "T": 1024}, "bfloat16",
                        "PKB's shapes: x1, x2, v (1, 1024, 2048) per rank (4 MiB each), a sequence of 2048 W "
                        "positions; FFTs of 4096 W points per channel"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    world_sizes=WorldSizes(reason="the all-to-all hands every rank D/W channels", splits=("D",)),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to make its peers' chunks without communicating)",
        "the filter is as long as the sequence (D, S), as Hyena's implicit filters are, drawn with std "
        "1/sqrt(S); PKB's fixed 4096 taps of std 1 are longer than the sequence at W = 1, where its FFT of "
        "length 2S wraps the filter's tail around (a circular, not causal, convolution), and give outputs of "
        "RMS ~64",
        "no num_groups, group_dim and with_zigzag_splitting arguments: one filter per channel (PKB's group_dim "
        "is 1) and always zigzag; the process group is an input the judge builds (PKB passes None)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Harness, Pkb, Sizes  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("hyena_forward_cp",
          params=(Arg("x1_seq", "x1"), Arg("x2_seq", "x2"), Arg("v_seq", "v"), Arg("h"), Arg("conv_bias", "bias"),
                  Harness("num_groups", Sizes("D", single=True)), Harness("group_dim", 1), Arg("group"),
                  Harness("with_zigzag_splitting", True)))
