"""moe_ep_wide: an expert-parallel MoE forward with twice as many experts as ranks (PKB 50).

Two experts per rank, top-2: each rank runs two expert MLPs on uneven batches (a grouped GEMM), and a
token's two picks may land on the same rank (one row sent or two: a lever for a dispatch that
deduplicates). Same computation as fused_moe_fwd (tasks/_moe_fused.py) with E = 2W.
"""
from pkb_env.contract import Preset
from pkb_env.tasks._moe_fused import COMMON_DEPARTURES, fused_moe_spec

SPEC = fused_moe_spec(
    name="moe_ep_wide",
    title="Expert-parallel MoE forward, two experts per rank (E = 2W, top-2)",
    description="Every rank holds hidden_states (M, N), its tokens, with each token's top-K experts topk_idx "
                "(M, K) and gate weights topk_weights (M, K, fp32), drawn per call (uneven: hot experts). E = "
                "2W experts with SwiGLU MLPs (gate and up N -> I, down I -> N, with biases), experts 2r and "
                "2r + 1 on rank r (w_gate etc. hold two experts). Every rank must return (M, N): for each of "
                "its tokens, the sum over its K picks of gate weight times down_e(silu(gate_e(x)) * up_e(x)).",
    parallelism="expert parallel: permute, all-to-all dispatch, two expert MLPs per rank, all-to-all combine, "
                "weighted unpermute",
    pkb_id=50,
    experts="2 * W",
    k="K",
    ep="W",
    presets={
        "tiny": Preset({"M": 16, "N": 32, "I": 16, "K": 2}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024, "I": 128, "K": 2}, "bfloat16",
                        "PKB's sizes: 1024 tokens a rank, hidden 1024, expert FFN 128, 2W experts, top-2"),
    },
    departures=COMMON_DEPARTURES,
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import MOE_ROUTER, MOE_UNMAPPED  # noqa: E402

PKB = Pkb('moe_ep_wide', differs=MOE_ROUTER, unmapped=MOE_UNMAPPED, variant="pkb")
