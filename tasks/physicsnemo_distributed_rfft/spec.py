"""physicsnemo_distributed_rfft: a 2-D real FFT of a batch of fields split over ranks by columns, returned
split by rows: PhysicsNeMo's DistributedRFFT2 (PKB 59).

Distributed spectral layers (Fourier neural operators, spectral weather models) transform fields too large
for one GPU: each rank holds a block of columns, transforms along the full dimension it holds, then an
all-to-all transposes the data so that every rank holds whole rows for the second transform. The
transpose dominates: the levers are shipping half the bytes (the real input, or the Hermitian half of the
first transform, instead of the full complex spectrum), overlapping the all-to-all with the first
transform's chunks and fusing the packing into the FFT's writes.
"""
import math

import torch

from pkb_env.contract import Comm, Compute, Const, Cost, Fft, Group, Output, Preset, Sharded, TaskSpec, Tensor
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """rfft2 of the whole fields in float64, rounded once to the complex type of the task dtype."""
    x = world.assemble(inputs, "x")
    out = torch.fft.rfft2(x.double(), dim=(1, 2), norm="ortho")
    return world.distribute(out.to(torch.complex64 if x.dtype == torch.float32 else torch.complex128), "out")


def cost(c):
    """Per rank: an all-to-all of its real input block (every output row block depends on every column
    block, so each rank must receive (W-1)/W of a block's worth of data: the real input is the least; the
    reference ships the complex spectrum, twice the bytes); a 2-D real FFT's 2.5 N log2 N FLOPs for its
    share of the N = B H X points on CUDA cores; every input and output once in HBM."""
    points = c["B"] * c["H"] * c["X"]
    return Cost(
        comm=(Comm("all_to_all", c.nbytes("x")),),
        compute=(Compute(2.5 * points / c["W"] * math.log2(c["H"] * c["X"]), "vector"),),
        memory_bytes=c.io_bytes(),
    )


SPEC = TaskSpec(
    name="physicsnemo_distributed_rfft",
    title="Distributed 2-D real FFT (PhysicsNeMo DistributedRFFT2)",
    description="Real fields (B, H, X) are split over the ranks by columns: rank r holds x (B, H, X/W), "
                "columns r*X/W to (r+1)*X/W - 1. Every rank must return its block of rows of the 2-D real FFT "
                "of the whole fields over dims (1, 2) with norm 'ortho' (torch.fft.rfft2(fields, dim=(1, 2), "
                "norm='ortho')): rank r the rows r*H/W to (r+1)*H/W - 1, (B, H/W, X//2 + 1), complex.",
    family="spatial",
    parallelism="spatial (pencil) decomposition: an all-to-all transpose between the two 1-D transforms",
    pkb_id=59,
    origin="NVIDIA PhysicsNeMo physicsnemo.distributed DistributedRFFT2 (FFT, all-to-all transpose, FFT, "
           "truncate)",
    inputs=(
        Tensor("x", ("B", "H", "X"), layout=Sharded(2), doc="this rank's block of columns of the real fields"),
        Const("norm", "ortho", doc="torch.fft's normalisation: 1/sqrt(H X) over the two transforms"),
        Group("group", "world", doc="the ranks the fields are split over, in column (and row) order"),
    ),
    outputs=(Output("out", ("B", "H", "X // 2 + 1"), dtype="complex", layout=Sharded(1),
                    doc="this rank's rows of rfft2 of the whole fields: every column frequency 0..X/2"),),
    golden=golden,
    cost=cost,
    tolerance_rule=Fft("H * X", 1, what="a 2-D FFT of H*X points of unit-normal values, 'ortho' (outputs of RMS "
                                        "1)"),
    clauses=(own_blocks("x", what="the transform mixes every rank's columns"),),
    presets={
        "tiny": Preset({"B": 2, "H": 8, "X": 16}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 16, "H": 1024, "X": 1024}, "float32",
                        "PKB's shapes: 16 fields of 1024 x 1024 float32 (64 MiB over the ranks), a 2-D "
                        "transform of 1M points each; the transpose moves 64/W MiB of complex data per rank"),
    },
    dtypes=("float32", "float64"),
    departures=(
        "inputs come from secret per-trial seeds, each rank its own columns (PKB seeds every rank with rank 0's "
        "seed and slices, so a candidate can make the whole field on every rank without communicating)",
        "both parts of the complex output are compared (PKB compares .float() of it: the real part only, so a "
        "spectrum with a wrong or missing imaginary part passed)",
        "no s and dim arguments: the transform is always over dims (1, 2) at the fields' full size (PKB passes "
        "s = (1024, 1024), dim = (1, 2)); the process group is an input the judge builds (PKB passes None)",
        "float64 fields are accepted too (complex128 spectra); PKB is float32 only",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Harness, Pkb, Sizes  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("physicsnemo_distributed_rfft", params=(Arg("x"), Harness("s", Sizes("H", "X")), Harness("dim", (1, 2)),
                                                   Arg("norm"), Arg("group")))
