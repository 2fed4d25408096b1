"""moe_ep_balanced: an expert-parallel MoE forward with as many experts as ranks (PKB 49).

One expert per rank, top-2: every token leaves its rank at least once unless one of its picks is the
local expert, so the all-to-all-v carry (W-1)/W of the picks, unevenly (hot experts per call). Same
computation as fused_moe_fwd (tasks/_moe_fused.py) with E = W.
"""
from pkb_env.contract import Preset
from pkb_env.tasks._moe_fused import COMMON_DEPARTURES, fused_moe_spec

SPEC = fused_moe_spec(
    name="moe_ep_balanced",
    title="Expert-parallel MoE forward, one expert per rank (E = W, top-2)",
    description="Every rank holds hidden_states (M, N), its tokens, with each token's top-K experts topk_idx "
                "(M, K) and gate weights topk_weights (M, K, fp32), drawn per call (uneven: hot experts). E = W "
                "experts with SwiGLU MLPs (gate and up N -> I, down I -> N, with biases), expert e on rank e "
                "(w_gate etc. hold one expert). Every rank must return (M, N): for each of its tokens, the sum "
                "over its K picks of gate weight times down_e(silu(gate_e(x)) * up_e(x)).",
    parallelism="expert parallel: permute, all-to-all dispatch, one expert MLP per rank, all-to-all combine, "
                "weighted unpermute",
    pkb_id=49,
    experts="W",
    k="K",
    ep="W",
    presets={
        "tiny": Preset({"M": 16, "N": 32, "I": 16, "K": 2}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024, "I": 128, "K": 2}, "bfloat16",
                        "PKB's sizes: 1024 tokens a rank, hidden 1024, expert FFN 128, W experts, top-2"),
    },
    departures=COMMON_DEPARTURES + ("top-2 needs two experts: the task takes W >= 2 (as PKB's)",),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import MOE_ROUTER, MOE_UNMAPPED  # noqa: E402

PKB = Pkb('moe_ep_balanced', differs=MOE_ROUTER, unmapped=MOE_UNMAPPED, variant="pkb")
