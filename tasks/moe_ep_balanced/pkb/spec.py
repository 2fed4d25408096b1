"""PKB 49 (moe_ep_balanced) as PKB states it: one expert per rank, top-2, each rank its own router and MLP
(tasks/_pkb_moe.py; docs/pkb_compat.md)."""
from pkb_env.contract import Preset
from pkb_env.tasks._pkb_moe import pkb_call, variant

SPEC = variant(task="moe_ep_balanced", pkb_id=49, experts="W", k="K", ep="W", mesh_dp="1", presets={
    "tiny": Preset({"M": 16, "N": 32, "I": 16, "K": 2}, "float32", "CPU ranks, milliseconds"),
    "bench": Preset({"M": 1024, "N": 1024, "I": 128, "K": 2}, "bfloat16", "PKB's sizes, E = W"),
})
PKB = pkb_call("moe_ep_balanced", lora=False)
