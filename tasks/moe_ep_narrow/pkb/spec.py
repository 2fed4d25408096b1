"""PKB 51 (moe_ep_narrow) as PKB states it: E = W / 2 experts (PKB's largest divisor of an even W below W), EP groups
of consecutive ranks inside data parallelism, top-min(2, E), each rank its own router and MLP (tasks/_pkb_moe.py;
docs/pkb_compat.md)."""
from pkb_env.contract import Preset
from pkb_env.tasks._pkb_moe import pkb_call, variant

SPEC = variant(task="moe_ep_narrow", pkb_id=51, experts="W / 2", k="min(2, W / 2)", ep="W / 2", mesh_dp="2",
               note="EP groups are consecutive ranks, W / 2 of them each (PKB's own subgroups).", presets={
    "tiny": Preset({"M": 16, "N": 32, "I": 16}, "float32", "CPU ranks, milliseconds"),
    "bench": Preset({"M": 1024, "N": 1024, "I": 128}, "bfloat16", "PKB's sizes, E = W / 2"),
})
PKB = pkb_call("moe_ep_narrow", lora=False)
