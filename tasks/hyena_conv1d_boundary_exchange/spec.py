"""hyena_conv1d_boundary_exchange: Hyena's short causal depthwise convolution over a sequence split across
ranks in zigzag order, each chunk's halo taken from the rank that holds the chunk before it (PKB 71).

Hyena (Savanna / Evo 2) runs a short depthwise causal filter of width 7 before its long convolution. With
context parallelism the sequence is cut into 2W chunks and rank r holds chunks r and 2W-1-r (the zigzag
that balances causal work): each chunk needs the 6 positions before it, which lie on rank r-1 for the
first chunk and on rank r+1 for the second (on the last rank, in its own first chunk). The convolution is
memory-bound: the levers are moving the two 6-column halos without a host round trip and convolving both
chunks in one pass without building padded copies.
"""
import torch
import torch.nn.functional as F

from pkb_env.contract import (Comm, Compute, Cost, Group, Output, PerRank, Preset, Relative, Replicated, Sum,
                              TaskSpec, Tensor)
from pkb_env.tasks._clauses import own_blocks

K = 7
"""The filter's width: Hyena's short convolution, and PKB's."""


def _sequence(inputs, world):
    """The global (B, D, 2W*T) sequence from every rank's two zigzag chunks."""
    w = world.world_size
    chunks = [None] * (2 * w)
    for rank, args in enumerate(inputs):
        chunks[rank], chunks[2 * w - 1 - rank] = args["x"].chunk(2, dim=-1)
    return torch.cat(chunks, dim=-1)


def golden(inputs, world):
    """The causal convolution of the whole sequence (K-1 zeros before it) in float64, rounded once, cut
    back into each rank's zigzag chunks."""
    seq = _sequence(inputs, world)
    weight = world.assemble(inputs, "weight").double()
    out = F.conv1d(F.pad(seq.double(), (K - 1, 0)), weight, groups=seq.shape[1]).to(seq.dtype)
    w = world.world_size
    pieces = out.chunk(2 * w, dim=-1)
    return [torch.cat([pieces[r], pieces[2 * w - 1 - r]], dim=-1) for r in range(w)]


def cost(c):
    """Per rank: K-1 positions of every channel to each neighbour holding an adjacent chunk (two from W = 3
    on, one at W = 2), in one round; 2K FLOPs per output element on CUDA cores; every input and output once
    in HBM (the bound: the convolution reads and writes each element once)."""
    halo = c["B"] * c["D"] * (K - 1) * c.elem
    return Cost(
        comm=(Comm("sendrecv", min(c["W"] - 1, 2) * halo),),
        compute=(Compute(2 * K * c["B"] * c["D"] * 2 * c["T"], "vector"),),
        memory_bytes=c.io_bytes(),
    )


# An output is a 7-term dot product of unit values and unit weights (RMS sqrt(7)); a depthwise kernel may
# accumulate its shifted multiply-adds in the dtype; the final rounding is the rtol's. Each of the K-1
# additions rounds a partial sum, and where the output is large so are its partial sums: that error grows
# with the value (Relative), which an RMS magnitude alone did not cover (with Sum only, the float32
# reference reached 0.43 of the allowance at tiny, W = 8, on the largest outputs; with Relative added and
# magnitude 1, 0.40 on mid-sized ones: benchmarks/tolerance_margins.py). Magnitude 2: the products of two
# normals are heavy-tailed, so partial sums well above the RMS are common in an output.
TOLERANCE = (Sum(K, 2, "dtype", what="the filter's 7 products (heavy-tailed), accumulated in the dtype or "
                                    "wider")
             + Relative(K - 1, "dtype", what="the partial sums' roundings, as large as the output"))

SPEC = TaskSpec(
    name="hyena_conv1d_boundary_exchange",
    title="Hyena short causal conv1d, zigzag context parallel (halo exchange)",
    description=f"A sequence of S = 2W*T positions is cut into 2W chunks of T; rank r holds chunks r and "
                f"2W-1-r side by side, x (B, D, 2T), and the whole depthwise filter weight (D, 1, {K}). Every "
                f"rank must return, in x's layout, its two chunks of the causal depthwise convolution of the "
                f"whole sequence: out[b, d, t] = sum_k weight[d, 0, k] * seq[b, d, t - {K - 1} + k], with "
                f"zeros before position 0.",
    family="context",
    parallelism="context parallel: zigzag sequence chunks, halos from the ranks holding the preceding chunks",
    pkb_id=71,
    origin="Hyena / Savanna (Evo 2) short depthwise causal convolution under zigzag context parallelism",
    inputs=(
        Tensor("x", ("B", "D", "2 * T"), layout=PerRank(),
               doc="chunks r and 2W-1-r of the sequence (B, D, 2W*T), side by side"),
        Tensor("weight", ("D", 1, K), layout=Replicated(), doc="one causal filter per channel"),
        Group("group", "world", doc="the context-parallel ranks, in zigzag order"),
    ),
    outputs=(Output("out", ("B", "D", "2 * T"), layout=PerRank(),
                    doc="the convolution at this rank's two chunks, in x's layout"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("x", what="each chunk's first positions read the previous chunk"),),
    presets={
        "tiny": Preset({"B": 2, "D": 4, "T": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 1, "D": 1024, "T": 1024}, "bfloat16",
                        "PKB's shapes: x (1, 1024, 2048) per rank (4 MiB), halos of 6 positions (12 KiB); "
                        "memory- and latency-bound"),
        "large": Preset({"B": 1, "D": 4096, "T": 16384}, "bfloat16",
                        "a long context of a wide model: 256 MiB per rank, HBM-bound, so one fused pass over "
                        "x decides"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its neighbours' chunks without communicating)",
        "the process group is an input the judge builds (PKB passes None for the default group: the same "
        "ranks)",
        "a `large` preset (4096 channels, 32768 positions per rank) where HBM bandwidth, not launches, sets "
        "the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('hyena_conv1d_boundary_exchange')
