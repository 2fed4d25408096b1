"""fused_moe_fwd_lora: an expert-parallel MoE forward whose experts carry LoRA adapters (PKB 32).

fused_moe_fwd (PKB 31) with a rank-8 LoRA adapter on each expert's gate, up and down projections, as in
multi-LoRA fine-tuning of an MoE model: each projection is x @ w.T + b + (x @ A.T) @ B.T. The adapters add
little work (R = 8 against I = 128) but two thin GEMMs per projection, which a fused kernel folds into the
base GEMM (x @ [w; A].T, then the B correction). See tasks/_moe_fused.py for what the five fused-MoE tasks
share and why the router's picks are inputs.
"""
from pkb_env.contract import Preset
from pkb_env.tasks._moe_fused import COMMON_DEPARTURES, fused_moe_spec

SPEC = fused_moe_spec(
    name="fused_moe_fwd_lora",
    title="Expert-parallel fused MoE forward with LoRA experts (8 experts, top-2, rank 8)",
    description="Every rank holds hidden_states (M, N), its tokens, with each token's top-K experts topk_idx "
                "(M, K) and gate weights topk_weights (M, K, fp32), drawn per call (uneven: hot experts). E = 8 "
                "experts with SwiGLU MLPs (gate and up N -> I, down I -> N, with biases), each projection with "
                "the expert's rank-R LoRA adapter (x @ w.T + b + (x @ A.T) @ B.T), sit contiguously on the "
                "ranks of the expert-parallel group (expert e on group rank e // (E / ep)); each rank holds its "
                "experts' weights and adapters. Every rank must return (M, N): for each of its tokens, the sum "
                "over its K picks of gate weight times down_e(silu(gate_e(x)) * up_e(x)).",
    parallelism="expert parallel: permute, all-to-all dispatch, grouped expert MLPs with LoRA adapters, "
                "all-to-all combine, weighted unpermute; EP groups of min(8, W) ranks",
    pkb_id=32,
    experts="E",
    k="K",
    ep="min(E, W)",
    lora=True,
    presets={
        "tiny": Preset({"M": 16, "N": 32, "I": 16, "R": 4, "E": 8, "K": 2}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024, "I": 128, "R": 8, "E": 8, "K": 2}, "bfloat16",
                        "PKB's sizes: 1024 tokens a rank, hidden 1024, expert FFN 128, LoRA rank 8, 8 experts, "
                        "top-2"),
    },
    departures=COMMON_DEPARTURES + (
        "each expert has its own LoRA adapter, drawn like the base weights (uniform in +-1/sqrt(fan_in)), "
        "sharded with it (PKB gives each rank one adapter of standard-normal A and B shared by its experts: "
        "the adapter's output, of RMS ~90, swamps the base projection's ~0.6, so the layer is the adapter's)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import MOE_ROUTER, MOE_UNMAPPED  # noqa: E402

PKB = Pkb('fused_moe_fwd_lora', differs=MOE_ROUTER, unmapped=MOE_UNMAPPED, variant="pkb")
