"""fused_moe_fwd: an expert-parallel MoE layer's forward, dispatch to combine (PKB 31).

Eight experts whatever the world size (PKB's "base case"): at W = 2, 4 and 8 the expert-parallel group is
the world and each rank holds 4, 2 or 1 experts; beyond 8 ranks the mesh puts EP groups of 8 inside data
parallelism. Two all-to-all-v of data-dependent sizes frame a grouped GEMM: the levers are fewer host
synchronisations (the split sizes), fusing the permutation into the dispatch and the weighting into the
combine, and overlapping the exchanges with the experts' GEMMs. See tasks/_moe_fused.py for what the five
fused-MoE tasks share and why the router's picks are inputs.
"""
from pkb_env.contract import Preset
from pkb_env.tasks._moe_fused import COMMON_DEPARTURES, fused_moe_spec

SPEC = fused_moe_spec(
    name="fused_moe_fwd",
    title="Expert-parallel fused MoE forward (8 experts, top-2)",
    description="Every rank holds hidden_states (M, N), its tokens, with each token's top-K experts topk_idx "
                "(M, K) and gate weights topk_weights (M, K, fp32), drawn per call (uneven: hot experts). E = 8 "
                "experts with SwiGLU MLPs (gate and up N -> I, down I -> N, with biases) sit contiguously on the "
                "ranks of the expert-parallel group (expert e on group rank e // (E / ep)); each rank holds its "
                "experts' weights. Every rank must return (M, N): for each of its tokens, the sum over its K "
                "picks of gate weight times down_e(silu(gate_e(x)) * up_e(x)).",
    parallelism="expert parallel: permute, all-to-all dispatch, grouped expert MLPs, all-to-all combine, "
                "weighted unpermute; EP groups of min(8, W) ranks",
    pkb_id=31,
    experts="E",
    k="K",
    ep="min(E, W)",
    presets={
        "tiny": Preset({"M": 16, "N": 32, "I": 16, "E": 8, "K": 2}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024, "I": 128, "E": 8, "K": 2}, "bfloat16",
                        "PKB's sizes: 1024 tokens a rank, hidden 1024, expert FFN 128, 8 experts, top-2"),
    },
    departures=COMMON_DEPARTURES,
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import MOE_ROUTER, MOE_UNMAPPED  # noqa: E402

PKB = Pkb('fused_moe_fwd', differs=MOE_ROUTER, unmapped=MOE_UNMAPPED, variant="pkb")
