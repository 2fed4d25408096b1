"""PKB 32 (fused_moe_fwd_lora) as PKB states it: PKB 31 with a rank-R LoRA adapter on each rank's three projections
(tasks/_pkb_moe.py; docs/pkb_compat.md).

float32 only: PKB draws the adapters' A and B standard normal, so outputs reach several hundred, and in bfloat16
(float16) PKB's own reference is up to 16 (1.9) away from the exact answer at tiny, 2% and beyond: PKB's tolerance of
1e-2 then passes only code that rounds as PKB's reference does (measured with tests/compat/test_pkb_variants.py's
golden check at W = 2 and 4). Judged at PKB's bench sizes in float32."""
from pkb_env.contract import Preset, WorldSizes
from pkb_env.tasks._pkb_moe import pkb_call, variant

SPEC = variant(task="fused_moe_fwd_lora", pkb_id=32, experts="E", k="K", ep="min(E, W)", mesh_dp="W / ep",
               world_sizes=WorldSizes(splits=("E",), reason="PKB spreads its 8 experts evenly over the ranks"),
               lora=True,
               presets={
    "tiny": Preset({"M": 16, "N": 32, "I": 16, "R": 4, "E": 8, "K": 2}, "float32", "CPU ranks, milliseconds"),
    "bench": Preset({"M": 1024, "N": 1024, "I": 128, "R": 8, "E": 8, "K": 2}, "float32",
                    "PKB's sizes (PKB 31's, with rank-8 adapters), in float32 (the module docstring)"),
}, dtypes=("float32",))
PKB = pkb_call("fused_moe_fwd_lora", lora=True)
