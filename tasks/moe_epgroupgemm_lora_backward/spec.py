"""moe_epgroupgemm_lora_backward: the in-place all-reduce of shared LoRA gradients after an expert-parallel
grouped-GEMM backward (PKB 30).

VeOmni's grouped-GEMM MoE with LoRA: the low-rank factors are shared by the experts of every rank, so each
rank's backward leaves a partial gradient of each factor, and the ranks sum them in place before the
optimizer step. Three small tensors (R = 8 rows or columns) cross ranks: latency rules, and the lever is one
reduction for all three (they need not be three collectives, nor three launches).
"""
from pkb_env.contract import Comm, Cost, Group, InPlace, Preset, TaskSpec, Tensor
from pkb_env.tasks._primitives import SUM, rank_sum
from pkb_env.tasks._clauses import own_blocks

GRADS = ("grad_fc1_1_lora_A", "grad_fc1_2_lora_A", "grad_fc2_lora_B")


def golden(inputs, world):
    """Each gradient's sum over ranks in float64, rounded once, written into every rank's copy."""
    for name in GRADS:
        total = rank_sum([args[name] for args in inputs])
        for args in inputs:
            args[name].copy_(total)
    return [None] * world.world_size


def cost(c):
    """Per rank: the three gradients all-reduced (issued together: one round); each read and written once."""
    return Cost(comm=(Comm("all_reduce", sum(c.nbytes(name) for name in GRADS)),), memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="moe_epgroupgemm_lora_backward",
    title="In-place all-reduce of shared LoRA gradients after an expert-parallel grouped-GEMM backward",
    description="Every rank of group holds its partial gradients of three LoRA factors shared by every rank's "
                "experts: grad_fc1_1_lora_A (R, N) and grad_fc1_2_lora_A (R, N), the gate and up projections' A "
                "factors, and grad_fc2_lora_B (N, R), the down projection's B factor. Every rank must replace each "
                "IN PLACE by its element-wise sum over the ranks of group, and return None.",
    family="expert",
    parallelism="expert parallel: partial gradients of LoRA factors shared across experts, summed over the group",
    pkb_id=30,
    origin="VeOmni grouped-GEMM MoE with LoRA (EP group GEMM backward: all-reduce of the shared LoRA gradients)",
    inputs=(
        Tensor("grad_fc1_1_lora_A", ("R", "N"), doc="this rank's partial gradient of the gate projection's A"),
        Tensor("grad_fc1_2_lora_A", ("R", "N"), doc="this rank's partial gradient of the up projection's A"),
        Tensor("grad_fc2_lora_B", ("N", "R"), doc="this rank's partial gradient of the down projection's B"),
        Group("group", "world", doc="the ranks sharing the LoRA factors"),
    ),
    outputs=tuple(InPlace(name, doc="the sum over ranks of this gradient") for name in GRADS),
    golden=golden,
    cost=cost,
    tolerance_rule=SUM,
    clauses=(own_blocks("grad_fc1_1_lora_A", "grad_fc1_2_lora_A", "grad_fc2_lora_B", what="the sums over ranks"),),
    presets={
        "tiny": Preset({"R": 8, "N": 32}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"R": 8, "N": 1024}, "bfloat16", "PKB's size: rank 8, hidden 1024 (48 KiB a rank)"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to compute the sums without communicating)",
        "the function returns None and the three reduced gradients are compared as in-place results: PKB returns "
        "the very input tensors, which this judge refuses as views of the inputs",
        "every call gets fresh gradients: PKB's timed calls all-reduce the same buffers again and again, "
        "multiplying them by W each call until bf16 overflows",
        "the judge passes the group (every rank); PKB passes None and falls back to WORLD inside the call",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb, Ret  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("moe_epgroupgemm_lora_backward", returns=(Ret("grad_fc1_1_lora_A"), Ret("grad_fc1_2_lora_A"),
                                                     Ret("grad_fc2_lora_B")))
