"""opensora_conv3d_allreduce: a 3D convolution with its input channels split over ranks, the partial
outputs summed by an all-reduce (PKB 76).

Open-Sora's tensor-parallel video VAE splits a Conv3d by input channels: each rank convolves its channel
block with the matching slice of the weight, giving a partial of the full output, and an all-reduce adds
the partials on every rank. At PKB's size (512 channels, a 19 x 66 x 66 video) the convolution and the
71 MiB all-reduce are of one order on H200s: the levers are overlapping the all-reduce with the
convolution (chunk the output by channels or frames and reduce finished chunks) and fusing the bias into
the reduction's last step.
"""
import torch.nn.functional as F

from pkb_env.contract import (Comm, Compute, Const, Cost, Group, Normal, Output, Preset, Replicated, Sharded,
                              TaskSpec, Tensor)
from pkb_env.tasks._conv import BIAS_ROUNDING, fan_in_normal
from pkb_env.tasks._gemm import split_k_tolerance
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """The convolution over every input channel in float64, plus the bias, rounded once; every rank gets it."""
    x = world.assemble(inputs, "x")
    weight, bias = world.assemble(inputs, "weight"), world.assemble(inputs, "bias")
    out = F.conv3d(x.double(), weight.double(), bias.double())
    return world.distribute(out.to(x.dtype), "out")


def cost(c):
    """Per rank: its channels' share of the convolution (an implicit GEMM, 2*27*C*O FLOPs per output
    element, C over the ranks, on tensor cores). Communication, the cheaper of: all-reduce the partial
    outputs, or gather every rank's input channels and weight slices and convolve all of them here; every
    input and output once in HBM."""
    out = c.nbytes("out")
    inputs = (Comm("all_gather", c["W"] * c.nbytes("x")), Comm("all_gather", c["W"] * c.nbytes("weight"), steps=0))
    outputs = c["B"] * c["O"] * (c["T"] - 2) * (c["H"] - 2) * (c["X"] - 2)
    return Cost(
        comm=c.cheapest((Comm("all_reduce", out),), inputs),
        compute=(Compute(2 * 27 * c["C"] * outputs / c["W"], "matmul"),),
        memory_bytes=c.io_bytes(),
    )


# An output element is a 27C-term dot product of unit inputs and weights of std 1/sqrt(27C) (RMS 1), cut
# into W partials of 27C/W terms (each accumulated in fp32 and rounded to the dtype) that the all-reduce
# adds in the dtype; a candidate may cut it otherwise (split_k_tolerance). The bias is added to the
# rounded sum: once more a rounding at RMS 1.
TOLERANCE = (split_k_tolerance("27 * C", "W", magnitude="1 / sqrt(27 * C)")
             + BIAS_ROUNDING)

SPEC = TaskSpec(
    name="opensora_conv3d_allreduce",
    title="Conv3d with input channels split over ranks + all-reduce (Open-Sora VAE)",
    description="Every rank holds x (B, C/W, T, H, X), its block of input channels of a video (B, C, T, H, X), "
                "the matching slice (O, C/W, 3, 3, 3) of the weight (O, C, 3, 3, 3), and the whole bias (O,). "
                "Every rank must return the whole conv3d(video, weight, bias) at stride 1, no padding, "
                "dilation 1: (B, O, T-2, H-2, X-2).",
    family="tensor",
    parallelism="tensor parallel over input channels: local conv3d, all-reduce of the partial outputs",
    pkb_id=76,
    origin="Open-Sora tensor-parallel VAE Conv3d (input-channel split, all-reduce)",
    inputs=(
        Tensor("x", ("B", "C", "T", "H", "X"), layout=Sharded(1), doc="this rank's block of input channels"),
        Tensor("weight", ("O", "C", 3, 3, 3), dist=fan_in_normal("27 * C"), layout=Sharded(1),
               doc="the weight's slice for this rank's input channels"),
        Tensor("bias", ("O",), dist=Normal(), layout=Replicated(), doc="one bias per output channel"),
        Const("stride", 1),
        Const("padding", 0),
        Const("dilation", 1),
        Const("groups", 1),
        Group("group", "world", doc="the ranks the input channels are split over"),
    ),
    outputs=(Output("out", ("B", "O", "T - 2", "H - 2", "X - 2"), layout=Replicated(),
                    doc="the whole convolution, on every rank"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("x", "weight", what="every channel block's partial convolution"),),
    presets={
        "tiny": Preset({"B": 1, "C": 24, "O": 4, "T": 4, "H": 5, "X": 5}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 1, "C": 512, "O": 512, "T": 19, "H": 66, "X": 66}, "bfloat16",
                        "PKB's shapes: 512 channels of a 19 x 66 x 66 video, a 71 MiB output all-reduced; the "
                        "convolution (0.99 TFLOP over the ranks) and the all-reduce of one order on H200s"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its peers' channels without communicating), and the bias is drawn "
        "per trial (PKB's is a fixed linspace(-0.1, 0.1))",
        "the weight is drawn with std 1/sqrt(27C) (a trained layer's scale) instead of PKB's standard normal, "
        "whose outputs of RMS sqrt(27C) = 118 hide PKB's bias of at most 0.1 below bf16's rounding step "
        "entirely",
        "no chunking of the convolution by channels at 2^31 elements (PKB's reference chunks above that; no "
        "preset comes near it), and the input is named x (PKB: input, Python's built-in's name)",
        "PKB lowers the channel count to 256 or 128 when W does not divide 512; here the world size must "
        "divide C (1, 2, 4, 8 at bench), and the process group is an input the judge builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("opensora_conv3d_allreduce", params=(Arg("input", "x"), Arg("weight"), Arg("bias"), Arg("stride"),
                                                Arg("padding"), Arg("dilation"), Arg("groups"), Arg("group")))
