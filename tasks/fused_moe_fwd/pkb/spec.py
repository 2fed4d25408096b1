"""PKB 31 (fused_moe_fwd) as PKB states it: eight experts, top-2, each rank its own router and MLP
(tasks/_pkb_moe.py; docs/pkb_compat.md)."""
from pkb_env.contract import Preset, WorldSizes
from pkb_env.tasks._pkb_moe import pkb_call, variant

SPEC = variant(task="fused_moe_fwd", pkb_id=31, experts="E", k="K", ep="min(E, W)", mesh_dp="W / ep",
               world_sizes=WorldSizes(splits=("E",), reason="PKB spreads its 8 experts evenly over the ranks"),
               presets={
    "tiny": Preset({"M": 16, "N": 32, "I": 16, "E": 8, "K": 2}, "float32", "CPU ranks, milliseconds"),
    "bench": Preset({"M": 1024, "N": 1024, "I": 128, "E": 8, "K": 2}, "bfloat16",
                    "PKB's sizes: 1024 tokens a rank, hidden 1024, expert FFN 128, 8 experts, top-2"),
})
PKB = pkb_call("fused_moe_fwd", lora=False)
