"""kimi_delta_attention_cp_tp: Kimi Delta Attention over a sequence split into cp blocks, heads split over tp
(PKB 74).

flash-linear-attention's KDA (the linear attention of Kimi Linear): a gated delta rule whose decay is
per key channel. Context parallelism as fla's KCP: a rank's block needs only the state entering it, which
is linear in the earlier blocks, so each rank runs its block from a zero state, forms the block's
transition matrix, and one all-gather of (state, transition) lets every rank fold its predecessors; heads
are split over tp and gathered at the end. The reference runs the chunked (WY) form as fla's kernels do;
the golden steps token by token in float64. Levers: fuse the chunk kernels, overlap the state all-gather
with the second pass, keep the transitions in fp32 but everything else on tensor cores.
"""
import torch
import torch.nn.functional as F

from pkb_env.contract import Comm, Compute, Cost, Group, Mesh, Output, Preset, Replicated, Sharded, TaskSpec, Tensor
from pkb_env.tasks import _delta_rule as delta
from pkb_env.tasks._clauses import own_blocks

LOWER_BOUND = -5.0
TP = "1 + min(1, W // 4) * (1 - W % 2)"  # 2 when W >= 4 and even (PKB's rule), else 1


def golden(inputs, world):
    """Every head over the whole sequence in float64, split back into cp blocks (the same on tp peers)."""
    out = kda({name: world.assemble(inputs, name) for name in ("q", "k", "v", "g", "beta", "a_log", "dt_bias")})
    return world.distribute(out.to(inputs[0]["q"].dtype), "out")


def kda(full):
    """KDA of whole sequences, every head, token by token in float64: `full` maps q, k, v, g, beta, a_log and
    dt_bias to the sequences' tensors."""
    full = {name: value.double() for name, value in full.items()}
    batch, seq, heads, key_dim = full["q"].shape
    scale = full["a_log"].exp().view(1, 1, heads, 1)
    log_decay = LOWER_BOUND * torch.sigmoid(scale * (full["g"] + full["dt_bias"].view(heads, key_dim)))
    q = F.normalize(full["q"], dim=-1) * key_dim ** -0.5
    return delta.recurrence(q, F.normalize(full["k"], dim=-1), full["v"], log_decay, full["beta"].sigmoid())


def cost(c):
    """A rank's outputs need, besides its block, only the state entering it for the heads it computes: at
    least one (K, V) matrix per head crosses its link, in one round (computing every head on every tp rank
    avoids the heads' all-gather, so it is not charged). FLOPs: the recurrence's ~6KV per token and head,
    split over all ranks. Bytes: the rank's share of the heads read once, its block of every head written."""
    b, block, heads, kd, vd = c["B"], c["L"], c["H"], c["K"], c["V"]
    share = heads // c["tp"]
    return Cost(
        comm=(Comm("sendrecv", b * share * kd * vd * c.elem, "cp"),),
        compute=(Compute(6 * kd * vd * b * block * heads / c["tp"], "matmul"),),
        memory_bytes=(b * block * share * (3 * kd + vd + 1) + b * block * heads * vd) * c.elem,
    )


# KDA's per-channel gate keeps more in the state than Gated DeltaNet's (gated_deltanet_cp): outputs have RMS
# ~3/K. Measured, an emulated fla-like kernel (bf16 or fp16 intermediates) uses 0.15-0.30 of the allowed.
TOLERANCE = delta.tolerance("4 / K")

SPEC = TaskSpec(
    name="kimi_delta_attention_cp_tp",
    title="Kimi Delta Attention, context parallel (cp) x tensor parallel heads (tp)",
    description="Every rank holds its cp block of the sequence (positions cp_rank*L to (cp_rank+1)*L - 1 of "
                "S = cp*L) of q, k, g (B, L, H, K), v (B, L, H, V), beta (B, L, H), every head (the same on "
                "its tp peers), and the gate's a_log (H,) and dt_bias (H*K,). Every rank must return its block "
                "(B, L, H, V) of KDA over the whole sequence, per batch and head: q, k L2-normalised, q scaled "
                "by K^-1/2, b_t = sigmoid(beta_t), per-channel decay a_t = exp(-5 sigmoid(exp(a_log) (g_t + "
                "dt_bias))), state S (K, V) from zero: S_t = diag(a_t) S_{t-1}; S_t += b_t k_t (v_t - S_t^T "
                "k_t)^T; o_t = S_t^T q_t.",
    family="context",
    parallelism="context parallel (KCP state passing) x tensor parallel over heads, Megatron order tp-cp",
    pkb_id=74,
    origin="flash-linear-attention KDA (chunk_kda) with KCP context parallelism (fla/ops/cp)",
    mesh=Mesh(("cp", f"W // ({TP})"), ("tp", TP)),
    inputs=(
        Tensor("q", ("B", "cp * L", "H", "K"), layout=Sharded(1, over="cp"), doc="queries, this cp block"),
        Tensor("k", ("B", "cp * L", "H", "K"), layout=Sharded(1, over="cp"), doc="keys"),
        Tensor("v", ("B", "cp * L", "H", "V"), layout=Sharded(1, over="cp"), doc="values"),
        Tensor("g", ("B", "cp * L", "H", "K"), layout=Sharded(1, over="cp"), doc="per-channel gate input"),
        Tensor("beta", ("B", "cp * L", "H"), layout=Sharded(1, over="cp"), doc="write strength before sigmoid"),
        Tensor("a_log", ("H",), dist=delta.A_LOG, layout=Replicated(), doc="log of the gate scale A"),
        Tensor("dt_bias", ("H * K",), dist=delta.DT_BIAS, layout=Replicated(),
               doc="per-head, per-channel gate bias"),
        Group("cp_group", "cp", doc="ranks holding the other blocks of the sequence, same heads"),
        Group("tp_group", "tp", doc="ranks holding the same block, splitting the heads"),
    ),
    outputs=(Output("out", ("B", "cp * L", "H", "V"), layout=Sharded(1, over="cp"),
                    doc="o_t for this cp block, every head"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("q", "k", "v", what="the state carried from every earlier block"),),
    presets={
        "tiny": Preset({"B": 1, "L": 80, "H": 4, "K": 32, "V": 16}, "float32",
                       "CPU ranks, milliseconds; a block spans two 64-token chunks"),
        "bench": Preset({"B": 1, "L": 64, "H": 16, "K": 128, "V": 128}, "bfloat16",
                        "PKB's shapes: 64 positions per cp rank, 16 heads of 128"),
        "large": Preset({"B": 1, "L": 8192, "H": 32, "K": 128, "V": 128}, "bfloat16",
                        "long context: 8192 positions per cp rank, 32 heads: the chunk kernels dominate and "
                        "the state exchange is small beside them"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial seeds; the gate's parameters follow fla's initialisation (A in "
        "[1, 16), dt_bias = softplus^-1 of dt in [1e-3, 1e-1]), so that states carry across blocks; PKB's "
        "linspaces give a log decay of ~-2.5 per token, which forgets everything within a few positions",
        "q, k, v, g, beta are one tensor per cp block, the same on the tp peers (PKB draws every rank's own, so "
        "its cp groups gather different sequences and its tp all-reduce sums the outputs of unrelated "
        "sequences); tp splits the heads, and the heads are all-gathered at the end",
        "context parallel as fla's KCP: each rank runs its block from a zero state and one all-gather of "
        "(state, transition) replaces PKB's all-gather of q, k, v, g, beta after which every rank computed the "
        "whole sequence; the reference runs the chunked (WY) form, the golden the token-by-token recurrence in "
        "float64 (PKB steps token by token in Python)",
        "a `large` preset (8192 positions per cp rank, 32 heads)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("fla_kimi_delta_attention_cp_tp",
          differs="pkb-env's tensor-parallel ranks split the heads and its context ranks pass the recurrent state "
                  "along the sequence; PKB's tp ranks each compute an output on different inputs that are summed, "
                  "and its inputs are drawn otherwise", variant="pkb")
