"""conv2d_halo_exchange: a 3x3 convolution of an image split into bands of rows, halo rows exchanged with
the neighbouring ranks (PKB 87).

Patch parallelism for diffusion UNets (DistriFusion-like): the latent image's rows are split over the
ranks, and every 3x3 convolution needs one row from each neighbouring band. Each rank swaps its boundary
rows with the ranks above and below (PKB all-gathers every rank's boundary rows instead; the reference
here sends them point to point) and convolves its band with the halo attached. The convolution dominates
at SD-UNet widths; the levers are overlapping the halo exchange with the interior rows' convolution (which
needs no halo) and fusing the concatenation away.
"""
import torch.nn.functional as F

from pkb_env.contract import (Comm, Compute, Const, Cost, Group, Normal, Output, Preset, Relative, Replicated,
                              Sharded, Sum, TaskSpec, Tensor)
from pkb_env.tasks._conv import BIAS_ROUNDING, fan_in_normal
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """The convolution of the whole image (zero padding 1) in float64, rounded once, split into bands."""
    x = world.assemble(inputs, "x")
    weight, bias = world.assemble(inputs, "weight"), world.assemble(inputs, "bias")
    out = F.conv2d(x.double(), weight.double(), bias.double(), stride=1, padding=1)
    return world.distribute(out.to(x.dtype), "out")


def cost(c):
    """Per rank: its band's share of the convolution (an implicit GEMM of 2*9*C*C FLOPs per output pixel,
    on tensor cores); one halo row to each neighbour (a rank at the image's edge has one), in one round;
    every input and output once in HBM."""
    row = c["B"] * c["C"] * c["X"] * c.elem
    return Cost(
        comm=(Comm("sendrecv", min(c["W"] - 1, 2) * row),),
        compute=(Compute(2 * 9 * c["C"] ** 2 * c["B"] * c["H"] * c["X"] / c["W"], "matmul"),),
        memory_bytes=c.io_bytes(),
    )


# Outputs: a 9C-term dot product of unit inputs and weights of std 1/sqrt(9C) (RMS 1), plus a unit bias.
# cuDNN and CPU convolutions accumulate in fp32; a convolution may round its result to the dtype before
# the bias is added (a separate add), once more at RMS 1; the final rounding is the rtol's.
# CPU (oneDNN) convolutions with the bias fused in err more on the largest outputs than the sum alone says:
# in 200 fp32 draws at tiny, in one process, the Sum + bias rule alone was reached to 0.57 at |y| 4-6 (0.29
# with the bias added after the convolution), so nine partial sums (one per tap) rounded at the output's
# magnitude are allowed too: the reference's worst then 0.32-0.33 at W = 2, 3, 4, 8 over 40 trials
# (benchmarks/tolerance_margins.py --dtype float32; the golden test's limit is 0.5).
TOLERANCE = (Sum("9 * C", "1 / sqrt(9 * C)", "float32", what="the 9C products of a 3x3 convolution, "
                                                               "accumulated in fp32")
             + Relative(9, "float32", what="the nine taps' partial sums, rounded at the output's magnitude")
             + BIAS_ROUNDING)

SPEC = TaskSpec(
    name="conv2d_halo_exchange",
    title="3x3 convolution of an image split into bands of rows (halo exchange)",
    description="Every rank holds x (B, C, H/W, X), its band of rows of an image (B, C, H, X) (rank r: rows "
                "r*H/W to (r+1)*H/W - 1), and the whole weight (C, C, 3, 3) and bias (C,). Every rank must "
                "return its band (B, C, H/W, X) of conv2d(image, weight, bias, stride 1, zero padding 1): an "
                "output row reads the input rows above and below it, which for a band's first and last rows "
                "lie on the neighbouring ranks.",
    family="spatial",
    parallelism="spatial (patch) parallel: rows split over ranks, halo rows exchanged with neighbours",
    pkb_id=87,
    origin="SD-UNet convolutions under patch parallelism (DistriFusion-like; PKB's file names no codebase)",
    inputs=(
        Tensor("x", ("B", "C", "H", "X"), layout=Sharded(2), doc="this rank's band of rows of the image"),
        Tensor("weight", ("C", "C", 3, 3), dist=fan_in_normal("9 * C"), layout=Replicated(),
               doc="the convolution's weight (out channels, in channels, 3, 3)"),
        Tensor("bias", ("C",), dist=Normal(), layout=Replicated(), doc="one bias per output channel"),
        Const("stride", 1),
        Const("padding", 1, doc="zero padding at the image's edges, and the halo's width in rows"),
        Group("group", "world", doc="the ranks the rows are split over, in row order"),
    ),
    outputs=(Output("out", ("B", "C", "H", "X"), layout=Sharded(2), doc="this rank's band of the output"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("x", what="a band's edge rows read the neighbours' rows"),),
    presets={
        "tiny": Preset({"B": 2, "C": 4, "H": 24, "X": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 1, "C": 1280, "H": 256, "X": 128}, "bfloat16",
                        "PKB's shapes at SD-UNet's widest stage: 1280 channels, a 256 x 128 latent split into "
                        "bands of 256/W rows; compute-bound (0.97 TFLOP over the ranks, 0.3 MiB halos)"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its neighbours' rows without communicating)",
        "the weight is drawn with std 1/sqrt(9C) (a trained layer's scale) instead of PKB's standard normal, "
        "whose outputs of RMS sqrt(9C) = 107 hide the unit bias below bf16's rounding step, so a candidate "
        "that dropped the bias would pass",
        "the image is declared as one global (B, C, H, X) tensor split by rows, the golden convolving all of "
        "it; PKB's band height 128/(W/2) gives the same 256 rows at W = 2, 4, 8 and is kept at bench",
        "the reference exchanges halo rows point to point with the two neighbours, not PKB's all-gather of "
        "every rank's boundary rows (the same math; the all-gather moves W times the bytes), and the "
        "process group is an input the judge builds (PKB passes None for the default group)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('conv2d_boundary_exchange')
