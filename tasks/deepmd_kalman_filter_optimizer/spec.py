"""deepmd_kalman_filter_optimizer: one step of DeePMD-kit's layer-wise Kalman filter optimizer with the
weight blocks split over ranks, in float64 (PKB 63).

DeePMD-kit trains its interatomic potentials with a Kalman filter (LKF): every weight block carries a
covariance P, and a step needs one global scalar, the innovation's variance summed over every block of
every rank, before each rank updates its blocks and the ranks all-gather the new weights. The work is a
pass over the N x N covariances in float64 (the gain P H, then the rank-one downdate of P): HBM-bound, with
a scalar all-reduce in the middle. The levers are a single fused pass per phase (the gain and H^T P H
together; the downdate and the division by lambda together), overlapping the weights' all-gather with the
covariance downdate, and no host synchronisation.
"""
import torch

from pkb_env.contract import (Comm, Compute, Const, Cost, Custom, Group, Output, PerRank, Preset, Replicated,
                              Rounded, Sharded, Sum, TaskSpec, Tensor)
from pkb_env.tasks._clauses import own_blocks


def _covariance(gen, shape, dtype, env):
    """Symmetric positive definite blocks 0.5 I + G G^T / (2N), G standard normal: eigenvalues in about
    [0.5, 2.5], a covariance part way through training."""
    blocks, n, _ = shape
    g = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float64)
    p = 0.5 * torch.eye(n, dtype=torch.float64, device=gen.device) + g @ g.transpose(1, 2) / (2 * n)
    return ((p + p.transpose(1, 2)) / 2).to(dtype)


def golden(inputs, world):
    """The step over every rank's blocks at once, in float64 (the task's precision: only the order of the
    operations differs from the reference's)."""
    lam, nue = inputs[0]["kalman_lambda"], inputs[0]["kalman_nue"]
    h = torch.cat([a["H"] for a in inputs]).double()
    p = torch.cat([a["P"] for a in inputs]).double()
    w = world.assemble(inputs, "weights").double()
    error = world.assemble(inputs, "error").double()
    gain = torch.einsum("bij,bj->bi", p, h)
    a = 1.0 / (lam * h.shape[0] + torch.einsum("bi,bi->", h, gain))
    weights = w + a * error * gain
    covariance = (p - a * torch.einsum("bi,bj->bij", gain, gain)) / lam
    blocks = inputs[0]["P"].shape[0]
    dtype = inputs[0]["P"].dtype
    out = []
    for rank in range(world.world_size):
        mine = covariance[rank * blocks:(rank + 1) * blocks].to(dtype)
        out.append((weights.to(dtype), mine, torch.tensor(nue * lam + 1 - nue, dtype=dtype)))
    return out


def cost(c):
    """Per rank: one all-reduce of a float64 scalar, then an all-gather of the updated weights (its blocks
    out, everyone's in); about 6 N^2 FLOPs per block (the gain's 2 N^2, the downdate's outer product,
    subtraction and division) on CUDA cores in float64; every input and output once in HBM (P read once and
    written once: the bound a fused kernel can reach where a block's P stays on chip between the phases;
    two passes otherwise)."""
    return Cost(
        comm=(Comm("all_reduce", c.elem), Comm("all_gather", c.nbytes("new_weights"))),
        compute=(Compute(6 * c["blocks"] * c["N"] ** 2, "vector"),),
        memory_bytes=c.io_bytes(),
    )


# Every output is one or two roundings of values of order 1 away from the truth: P' = (P - a K K^T) / lam
# (the downdate a K K^T is about 1/(W blocks N) of P, so its own sums reach P' far below P's rounding); the
# weights plus an update of about 1e-5; lambda's next value. The golden is float64 as well, so only the order
# of operations separates any two float64 algorithms: a few roundings at magnitude 1. The gain K = P H is an
# N-term sum (RMS ~sqrt(N)) that reaches the outputs scaled by a (1/(W blocks N)), far below.
# A step in float32 differs by ~1e-8 to 1e-7, about 1e8 times the allowance.
TOLERANCE = (Rounded(4, 1, what="P's downdate, the division by lambda, the weights' update: a few roundings "
                                 "at magnitude 1")
             + Sum("N", "1 / N", "dtype", what="the gain P H's N terms, reaching the outputs scaled by a"))

SPEC = TaskSpec(
    name="deepmd_kalman_filter_optimizer",
    title="DeePMD-kit layer-wise Kalman filter optimizer step (float64)",
    description="Every rank holds `blocks` weight blocks of N values: weights (blocks, N), the prediction's "
                "gradient H (blocks, N) and each block's covariance P (blocks, N, N) (symmetric positive "
                "definite), and the prediction's error (), the same on every rank; all float64. With lam = "
                "kalman_lambda and the sum over every block of every rank, a = 1 / sum_i (lam + H_i^T P_i H_i); "
                "per block K_i = P_i H_i, the new weights weights_i + a * error * K_i and the new covariance "
                "(P_i - a K_i K_i^T) / lam. Every rank must return (every rank's new weights in rank order "
                "(W * blocks, N), its own new covariances (blocks, N, N), kalman_nue * lam + 1 - kalman_nue as a "
                "0-dim tensor).",
    family="data",
    parallelism="data parallel optimizer: weight blocks split over ranks, a global scalar all-reduce, an "
                "all-gather of the weights",
    pkb_id=63,
    origin="DeePMD-kit deepmd/pt/optimizer/LKF.py (LKFOptimizer's distributed update)",
    inputs=(
        Tensor("H", ("blocks", "N"), layout=PerRank(), doc="the prediction's gradient for this rank's blocks"),
        Tensor("error", (), layout=Replicated(), doc="the prediction's error (averaged over ranks before the step)"),
        Tensor("weights", ("W * blocks", "N"), layout=Sharded(0), doc="this rank's weight blocks"),
        Tensor("P", ("blocks", "N", "N"), dist=Custom(_covariance, "0.5 I + G G^T / (2N), G standard normal: "
                                                                "symmetric positive definite, eigenvalues 0.5-2.5"),
               layout=PerRank(), doc="each of this rank's blocks' covariance"),
        Const("kalman_lambda", 0.98, doc="the forgetting factor of this step"),
        Const("kalman_nue", 0.9987, doc="how fast lambda approaches 1"),
        Group("group", "world", doc="the ranks the weight blocks are split over"),
    ),
    outputs=(
        Output("new_weights", ("W * blocks", "N"), layout=Replicated(),
               doc="every rank's updated weight blocks, in rank order"),
        Output("new_P", ("blocks", "N", "N"), layout=PerRank(), doc="this rank's updated covariances"),
        Output("next_lambda", (), layout=Replicated(), doc="kalman_nue * kalman_lambda + 1 - kalman_nue"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("H", "P", "weights", what="a = 1 / sum over every rank's blocks"),),
    presets={
        "tiny": Preset({"blocks": 2, "N": 16}, "float64", "CPU ranks, milliseconds"),
        "bench": Preset({"blocks": 8, "N": 1024}, "float64",
                        "PKB's shapes: 8 blocks of 1024 weights per rank, 64 MiB of float64 covariances per "
                        "rank read and written; HBM-bound"),
    },
    dtypes=("float64",),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to make its peers' blocks without communicating)",
        "each covariance is a random symmetric positive definite matrix (PKB passes the identity, so P H = H and "
        "H^T P H = |H|^2, and a candidate could skip the N x N products)",
        "the error is the same on every rank, as DeePMD-kit all-reduces it before the step (PKB draws a "
        "different error per rank)",
        "the lists of (1024, 1) tensors are stacked: H and weights (blocks, N), P (blocks, N, N); the weights "
        "come back as one (W * blocks, N) tensor, not a list of 8W",
        "nothing is updated in place: PKB assigns the new weights and covariances into the caller's lists; here "
        "they are returned",
        "every rank holds the same number of blocks, so no all_gather_object of the block sizes (a host "
        "synchronisation in PKB); the process group is an input the judge builds (PKB uses the default group)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Computed, Pkb, Ret  # noqa: E402  (kept apart from the task's own)


def _pkb_columns(name):
    """PKB passes a list of (N, 1) columns, one per block; this task stacks the blocks as rows."""
    return lambda call: [row.reshape(-1, 1) for row in call.values[name]]


PKB = Pkb("deepmd_kalman_filter_optimizer",
          params=(Computed("H", _pkb_columns("H"), "this rank's blocks of H as (N, 1) columns"), Arg("error"),
                  Computed("weights", _pkb_columns("weights"), "this rank's weight blocks as (N, 1) columns"),
                  Computed("P", lambda call: list(call.values["P"]), "this rank's covariances, a list"),
                  Arg("kalman_lambda"), Arg("kalman_nue")),
          returns=(Ret("new_weights", fn=lambda v, call: torch.stack([w.reshape(-1) for w in v]),
                       text="every rank's (N, 1) columns stacked as rows"),
                   Ret("new_P", fn=lambda v, call: torch.stack(list(v)), text="the list stacked"),
                   Ret("next_lambda")))
