"""load_balancing_loss: the MoE router's auxiliary load-balancing loss, averaged over ranks (PKB 24).

Switch Transformer's and Mixtral's auxiliary loss (Hugging Face's load_balancing_loss_func): every
data-parallel rank computes E * sum_e f_e * P_e over its own tokens (f_e the fraction of routing slots
that picked expert e, P_e the mean router probability of e) and the ranks average it. One scalar
crosses ranks: latency rules, and the lever is a single fused pass (softmax, top-k, counts and means in
one kernel) ahead of one small all-reduce.

The top-k is part of the statement, ties included: bf16 router logits tie at the top-k boundary in about
one row in a thousand, and a different pick moves the loss by ~1e-4 of itself, far outside an fp32
tolerance. The rule (ties go to the lower expert index) is stated, and an edge case draws logits on a
grid of 0.5 so that ties come in most rows.
"""
import torch

from pkb_env.contract import (Clause, Comm, Compute, Const, Cost, Edge, Output, Preset, Replicated, Sum, TaskSpec,
                              Tensor)
from pkb_env.tasks._clauses import sixteen_bit

EXPERTS, TOP_K = 8, 2


def tied_logits(x, draw):
    """Every rank's logits rounded to multiples of 0.5: ties at the top-k boundary in most rows."""
    return (x.float() * 2).round().div(2).to(x.dtype)


def tied_at_cut(trial) -> bool:
    """A row of some rank whose top_k-th and next largest logits are equal (the tie rule decides its route)."""
    k = trial.inputs[0]["top_k"]
    ranked = [x.sort(dim=-1, descending=True).values for x in trial.each("gate_logits")]
    return any(bool((r[:, k - 1] == r[:, k]).any()) for r in ranked)


def local_loss(logits: torch.Tensor, experts: int, top_k: int) -> torch.Tensor:
    """One rank's loss in float64: probabilities from the exact logits, top-k by the logits with ties to the
    lower index (a stable sort: equal logits keep index order)."""
    exact = logits.double()
    chosen = exact.sort(dim=-1, descending=True, stable=True).indices[:, :top_k]
    routed = torch.bincount(chosen.flatten(), minlength=experts).double() / exact.shape[0]
    return experts * (routed * exact.softmax(dim=-1).mean(dim=0)).sum()


def golden(inputs, world):
    """The mean over ranks of each rank's loss, in float64, rounded once to fp32."""
    first = inputs[0]
    losses = [local_loss(args["gate_logits"], first["num_experts"], first["top_k"]) for args in inputs]
    return world.distribute((sum(losses) / world.world_size).float(), "loss")


def cost(c):
    """Per rank: an all-reduce of one fp32 scalar; about 8 FLOPs a logit (exp, sum, divide, the top-k
    comparisons, the counts and means); the logits read once."""
    return Cost(comm=(Comm("all_reduce", c.nbytes("loss")),), compute=(Compute(8 * c["M"] * EXPERTS, "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="load_balancing_loss",
    title="MoE load-balancing loss, averaged over data-parallel ranks",
    description="Every rank holds gate_logits (M, E), the router logits of its own M tokens (E = num_experts = "
                "8). On each rank: p = softmax(gate_logits) along E, computed in fp32; each token is routed to "
                "the top_k = 2 experts with the largest logits, ties going to the lower expert index; f_e = "
                "(tokens routed to e) / M and P_e = the mean over tokens of p_e; loss_r = E * sum_e f_e * P_e. "
                "Every rank must return the mean over ranks of loss_r, a 0-dim fp32 tensor.",
    family="expert",
    parallelism="expert parallel (data-parallel replicas of a router): auxiliary loss averaged over ranks",
    pkb_id=24,
    origin="Hugging Face transformers load_balancing_loss_func (Mixtral; Switch Transformer's auxiliary loss), "
           "averaged over data-parallel ranks with one all-reduce",
    inputs=(
        Tensor("gate_logits", ("M", EXPERTS), doc="this rank's router logits, one row per token"),
        Const("num_experts", EXPERTS, doc="E, the number of experts"),
        Const("top_k", TOP_K, doc="experts per token"),
    ),
    outputs=(Output("loss", (), dtype="float32", layout=Replicated(), doc="the mean over ranks of the loss"),),
    golden=golden,
    cost=cost,
    # The counts are exact; what rounds is the fp32 mean of M probabilities per expert (weighed by E * f_e
    # in the loss) and the W-term fp32 sum of the ranks' losses (each ~top_k = 2, ~1 after the division).
    # Magnitudes 16 / M and 2 put the reference at 0.02-0.03 of the allowance (40 trials, tiny): four
    # times tighter keeps it well inside and rejects more.
    tolerance_rule=(Sum("M", "4 / M", "float32", what="the fp32 means of the router probabilities")
                    + Sum("W", 1, "float32", what="the fp32 sum of the ranks' losses")),
    clauses=(Clause("ties_to_lower", "top_k by the largest logits, ties going to the lower expert index: a row whose "
                    "2nd and 3rd largest logits are equal", tied_at_cut,
                    "edge case tied_logits (logits on a grid of 0.5)",
                    edge="tied_logits"),
             sixteen_bit("fp32_softmax", "p = softmax(gate_logits) computed in fp32 from 16-bit logits")),
    presets={
        "tiny": Preset({"M": 64}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024}, "bfloat16", "PKB's size: 1024 tokens a rank, 8 experts"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    edges=(Edge("tied_logits", "gate_logits", tied_logits, "logits on a grid of 0.5, tied at the top-k boundary",
                everywhere=True),),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to compute its peers' losses without communicating)",
        "the softmax is computed in fp32 whatever the logits' dtype and ties at the top-k boundary go to the "
        "lower expert index, both stated (PKB takes the softmax in the logits' dtype and leaves ties to "
        "torch.topk), with an edge case of tied logits; the golden is in float64",
        "the attention mask and the per-layer tuple of PKB's signature are left out (PKB passes None and "
        "one tensor)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Harness, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("load_balancing_loss_fn", params=(Arg("gate_logits"), Arg("num_experts"), Arg("top_k"),
                                             Harness("attention_mask", None)),
          differs="pkb-env states the tie rule of the top-k (the lower expert index first) and draws logits that "
                  "tie; PKB takes torch.topk's order, which defines none", variant="pkb")
