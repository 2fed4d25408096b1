"""dinov2_sinkhorn_knopp: DINOv2's Sinkhorn-Knopp centering of teacher scores over samples split across
ranks (PKB 80).

DINOv2 (and iBOT's masked-patch loss) turns the teacher's prototype scores into soft assignments that use
every prototype equally: Q = exp(scores / temperature), then a few alternating normalisations, of every
prototype's column over all samples of every rank (an all-reduce of K sums per iteration) and of every
sample's row (local). The work is a few passes over a (rows, K) float32 matrix, with an all-reduce of a
K-vector between passes: the levers are fusing the exp, the column sums and the divisions into as few
passes over HBM as possible (the row normalisation and the next column sums in one pass), and
overlapping the small all-reduces with them.
"""
import torch

from pkb_env.contract import (Clause, Comm, Compute, Const, Cost, Group, Length, Normal, Output, PerRank,
                              Preset, Relative, TaskSpec, Tensor)
from pkb_env.tasks._clauses import extreme_rows_edge, sixteen_bit


def golden(inputs, world):
    """The iterations over every rank's samples at once in float64, rounded once, cut back into ranks' rows."""
    args = inputs[0]
    blocks = [a["teacher_output"] for a in inputs]
    q = torch.exp(torch.cat(blocks).double() / args["teacher_temp"])
    samples, prototypes = q.shape
    q = q / q.sum()
    for _ in range(args["n_iterations"]):
        q = q / q.sum(dim=0, keepdim=True) / prototypes
        q = q / q.sum(dim=1, keepdim=True) / samples
    out = (q * samples).to(torch.float32)
    return list(out.split([b.shape[0] for b in blocks]))


def cost(c):
    """Per rank: one all-reduce of K column sums per iteration (the total mass and sample count ride along
    the first), dependent rounds; exp and about 4 FLOPs per element and iteration on CUDA cores; the scores
    read once and Q written once (a fused kernel keeps the matrix on chip only where it fits, so this is a
    lower bound)."""
    iterations = 3
    return Cost(
        comm=(Comm("all_reduce", c["K"] * 4, steps=iterations),),
        compute=(Compute(c["rows"] * c["K"] * (2 + 4 * iterations), "vector"),),
        memory_bytes=c.io_bytes(),
    )


# Every output is positive (about 1/K), so its error is relative. The iterations are well conditioned:
# Sinkhorn's alternating normalisations contract (Hilbert's projective metric), so an earlier iteration's
# rounding is damped by the next ones and only the last iteration's sums and divisions reach the output
# at full size, plus the exp's error (u times |scores / temperature|, up to ~6 here). Measured: the float32
# reference stays at 8-10 u at tiny and 11-13 u at bench (W = 4) after 1, 2 or 3 iterations alike. The
# rule allows the last column sums over the B = W*M samples and row sums over K prototypes in any order in
# fp32, sequential or atomic (about u sqrt(n) each), and 20 roundings for the exp, divisions and scalings:
# 30 u at tiny, 212 u at bench; one iteration too few differs by ~1700 u at bench, a column sum over the
# rank's own samples only (the all-reduce skipped) by ~3e5 u.
TOLERANCE = Relative("sqrt(W * M) + sqrt(K) + 20", "float32",
                     what="the last iteration's column sums over all samples and row sums over K prototypes "
                          "(any order: about sqrt(n) roundings each), the exp, divisions and scalings")

SPEC = TaskSpec(
    name="dinov2_sinkhorn_knopp",
    title="DINOv2 Sinkhorn-Knopp centering over samples split across ranks",
    description="Every rank holds teacher_output (rows, K), the scores of its own samples (rows differ by rank) "
                "over K prototypes. Computing in float32, with B the number of "
                "samples over all ranks and Q = exp(scores / teacher_temp) over all of them, scaled to total 1, "
                "repeat n_iterations times: divide each column of Q by its sum over all samples and by K; "
                "divide each row by its sum and by B. Every rank must return its rows of B * Q, (rows, K) "
                "float32.",
    family="data",
    parallelism="data parallel: samples split over ranks, all-reduces of per-prototype sums",
    pkb_id=80,
    origin="DINOv2 SinkhornKnoppTeacher.sinkhorn_knopp_teacher (and its iBOT masked-patch variant)",
    inputs=(
        Tensor("teacher_output", ("rows", "K"), dist=Normal(std=0.1),
               doc="the teacher's scores of this rank's samples"),
        Const("teacher_temp", 0.07),
        Const("n_iterations", 3),
        Group("group", "world", doc="the data-parallel ranks"),
    ),
    lengths=(Length("rows", "3 * M / 4", "5 * M / 4 + 1", doc="this rank's samples: M on average"),),
    edges=(extreme_rows_edge("rows", "3 * M / 4", "5 * M / 4"),),
    outputs=(Output("out", None, dtype="float32", layout=PerRank(), max_shape=("5 * M / 4", "K"),
                    doc="(rows, K): this rank's rows of the centred assignments"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(Clause("ragged", "rows differ by rank: the column sums run over every rank's own number of samples",
                    lambda t: len({a["teacher_output"].shape[0] for a in t.inputs}) > 1,
                    "edge case extreme_rows (rank 0 the fewest rows, the last rank the most)",
                    edge="extreme_rows", applies=lambda x: x["W"] > 1, where="one block"),
             sixteen_bit("fp32_iterations", "computed in float32: a 16-bit input's exponentials and sums not taken "
                         "in its own dtype")),
    presets={
        "tiny": Preset({"M": 8, "K": 32}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "K": 16384}, "bfloat16",
                        "PKB's shapes: 768 to 1280 samples (PKB: 1024) of 16384 prototypes per rank, 32 MiB "
                        "of bf16 scores on average, a float32 output; HBM-bound"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its peers' scores without communicating)",
        "every rank holds its own number of samples, drawn per call in [3M/4, 5M/4] (PKB gives every rank "
        "1024, so the all-reduced sample count is always 1024 W and could be hard-coded)",
        "scores are drawn with std 0.1 (PKB: 0.01), so scores / temperature spread over about +-5 as a "
        "trained teacher's peaked scores do; at PKB's 0.01 Q is uniform within 15%, Sinkhorn converges in one "
        "iteration, and at bench a candidate running 2 of the 3 iterations differs by 0.001 ulp (here "
        "~1700 ulps)",
        "the scores come in the task's dtype (bf16 at bench, as a teacher head under mixed precision emits "
        "them) and the output is float32; PKB's scores are always float32 (its reference casts to float32 "
        "anyway, as this one does)",
        "no n_masked_patches_tensor argument: it always equals the rank's rows (PKB passes it beside them), "
        "so the sample count comes from teacher_output's shape; the process group is an input the judge "
        "builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Computed, Pkb  # noqa: E402  (kept apart from the task's own)


def _pkb_n_masked(call):
    """PKB passes this rank's sample count as a (1,) int64 tensor (its reference all-reduces it)."""
    rows = call.values["teacher_output"]
    return torch.tensor([rows.shape[0]], dtype=torch.int64, device=rows.device)


PKB = Pkb("dinov2_distributed_sinkhorn_knopp",
          params=(Arg("teacher_output"), Arg("teacher_temp"),
                  Computed("n_masked_patches_tensor", _pkb_n_masked, "this rank's rows, a (1,) int64 tensor"),
                  Arg("n_iterations"), Arg("group")))
