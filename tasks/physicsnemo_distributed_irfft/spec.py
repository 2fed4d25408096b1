"""physicsnemo_distributed_irfft: the inverse 2-D real FFT of a half spectrum split over ranks by rows,
returned as real fields split by columns: PhysicsNeMo's DistributedIRFFT2 (PKB 60).

The way back of a distributed spectral layer (Fourier neural operators, spectral weather models): each rank
holds a block of rows of the half spectrum and must end with a block of columns of the real fields. The
complex-to-real inverse along the columns needs a row's whole half spectrum (which the rank has) and the
inverse along the rows needs every row (which it has not): one all-to-all transpose between the two. The
levers are shipping only what the real output needs (the Hermitian half of each column's data: the bytes
of the real output instead of a complex field), overlapping the transpose with the first inverse's chunks,
and fusing the packing into the FFTs.
"""
import math

import torch

from pkb_env.contract import Clause, Comm, Compute, Const, Cost, Fft, Group, Output, Preset, Sharded, TaskSpec, Tensor
from pkb_env.tasks._clauses import own_blocks


def imaginary_at_edges(trial) -> bool:
    """Some rank's half spectrum has nonzero imaginary parts at column frequencies 0 and X/2."""
    return any(bool((x[..., 0].imag != 0).any() and (x[..., -1].imag != 0).any()) for x in trial.each("x"))


def golden(inputs, world):
    """irfft2 of the whole half spectrum in float64 (complex128), rounded once to float32."""
    x = world.assemble(inputs, "x")
    out = torch.fft.irfft2(x.to(torch.complex128), s=(world["H"], world["X"]), dim=(2, 3), norm="ortho")
    return world.distribute(out.to(torch.float32), "out")


def cost(c):
    """Per rank: an all-to-all of the bytes of its real output block (each output column block depends on
    every row block; the Hermitian half of a complex field carries exactly the real output's information;
    the reference ships the complex field, twice the bytes); an inverse 2-D real FFT's 2.5 N log2 N FLOPs
    for its share of the N = B C H X points on CUDA cores; every input and output once in HBM."""
    points = c["B"] * c["C"] * c["H"] * c["X"]
    return Cost(
        comm=(Comm("all_to_all", c.nbytes("out")),),
        compute=(Compute(2.5 * points / c["W"] * math.log2(c["H"] * c["X"]), "vector"),),
        memory_bytes=c.io_bytes(),
    )


SPEC = TaskSpec(
    name="physicsnemo_distributed_irfft",
    title="Distributed inverse 2-D real FFT (PhysicsNeMo DistributedIRFFT2)",
    description="A half spectrum (B, C, H, X//2 + 1), complex64, is split over the ranks by rows: rank r holds "
                "x (B, C, H/W, X//2 + 1), rows r*H/W to (r+1)*H/W - 1. Every rank must return its block of "
                "columns of the inverse 2-D real FFT of the whole half spectrum over dims (2, 3) with norm "
                "'ortho' (torch.fft.irfft2(spectrum, s=(H, X), dim=(2, 3), norm='ortho'), X even): rank r the "
                "columns r*X/W to (r+1)*X/W - 1, (B, C, H, X/W) float32. As irfft2 does, the imaginary parts of "
                "column frequencies 0 and X/2 are ignored.",
    family="spatial",
    parallelism="spatial (pencil) decomposition: an all-to-all transpose between the two 1-D inverses",
    pkb_id=60,
    origin="NVIDIA PhysicsNeMo physicsnemo.distributed DistributedIRFFT2 (conjugate pad, inverse FFT, "
           "all-to-all transpose, inverse FFT, real part)",
    inputs=(
        Tensor("x", ("B", "C", "H", "X // 2 + 1"), dtype="complex64", layout=Sharded(2),
               doc="this rank's block of rows of the half spectrum (column frequencies 0..X/2)"),
        Const("norm", "ortho", doc="torch.fft's normalisation: 1/sqrt(H X) over the two inverses"),
        Group("group", "world", doc="the ranks the spectrum is split over, in row (and column) order"),
    ),
    outputs=(Output("out", ("B", "C", "H", "X"), layout=Sharded(3),
                    doc="this rank's columns of irfft2 of the whole half spectrum"),),
    golden=golden,
    cost=cost,
    tolerance_rule=Fft("H * X", "sqrt(2)", what="an inverse 2-D FFT of H*X points, 'ortho', of a half spectrum "
                                                "whose parts are unit normals (outputs of RMS about 1.4)"),
    clauses=(Clause("ignored_imaginary", "the imaginary parts of column frequencies 0 and X/2 are ignored (as irfft2 "
                    "does): nonzero there", imaginary_at_edges, "every draw (complex normal values)"),
             own_blocks("x", what="every rank's rows enter every column")),
    presets={
        "tiny": Preset({"B": 1, "C": 2, "H": 8, "X": 16}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 2, "C": 10, "H": 720, "X": 1440}, "float32",
                        "PKB's shapes: 2 x 10 fields on a 720 x 1440 grid (a 0.25-degree global weather "
                        "field), a 79 MiB complex64 half spectrum over the ranks, 79 MiB of float32 output"),
    },
    dtypes=("float32",),
    departures=(
        "inputs come from secret per-trial seeds, each rank its own rows (PKB seeds every rank with rank 0's "
        "seed and slices, so a candidate can make the whole spectrum on every rank without communicating)",
        "the reference inverts along the columns first, as the real part of a complex inverse of the half "
        "spectrum with its mirrored frequencies doubled, then makes one all-to-all; PKB all-gathers the whole "
        "zero-padded spectrum (W times the bytes, 166 MB at W = 8) only to build the conjugate mirror of "
        "every column, then makes a second all-to-all. The result is the same irfft2, for any half spectrum",
        "no s and dim arguments: the inverse is always over dims (2, 3) to the grid (H, X) with X = 2 (X//2 + "
        "1 - 1) (PKB passes s = (720, 1440), dim = (-2, -1)); the process group is an input the judge builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Harness, Pkb, Sizes  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("physicsnemo_distributed_irfft", params=(Arg("x"), Harness("s", Sizes("H", "X")), Harness("dim", (-2, -1)),
                                                    Arg("norm"), Arg("group")))
