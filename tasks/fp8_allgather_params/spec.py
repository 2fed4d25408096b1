"""fp8_allgather_params: FP8 parameter all-gather with delayed scaling (PKB 53).

FSDP's unshard in FP8 training (torchao's float8 all-gather under FSDP2, Transformer Engine's delayed
scaling): every rank casts its parameter shard to float8_e4m3fn with a scale from the shard's amax
history and the ranks all-gather the codes, so the all-gather moves a byte a parameter instead of two.
The reference ships the codes (as bytes) and one fp32 scale per rank in two all-gathers, then
dequantises. The levers: one transfer for codes and scales, the cast fused into it, and the dequantise
fused into the receive.

Each rank keeps its own history and scale (as PKB: no amax reduction across ranks), so every block of
the result is dequantised with its own rank's scale.
"""
import torch

from pkb_env.contract import Comm, Compute, Cost, Output, Replicated, Sharded, TaskSpec, Tensor, Ulps
from pkb_env.tasks._delayed_fp8 import (DEPARTURES, HISTORY_OUTPUT, STATEMENT, clauses, delayed_scaling, edges,
                                       history_input)
from pkb_env.tasks._training import DTYPES, shard_presets


def golden(inputs, world):
    """Every rank's block of q * s as defined (its codes from its own history and amax), exact in float64
    and rounded once to the dtype, on every rank; each rank's own updated history."""
    blocks, histories = [], []
    for args in inputs:
        values, history = delayed_scaling(args["flat_param_shard"], args["amax_history"])
        blocks.append(values)
        histories.append(history)
    full = torch.cat(blocks).to(inputs[0]["flat_param_shard"].dtype)
    return list(zip(world.distribute(full, "full"), histories))


def cost(c):
    """Per rank: an all-gather of every rank's fp8 codes and scale (P + 4 bytes a rank); the amax, the cast
    and the dequantise of W blocks are about 3P + W*P FLOPs; the shard read and the full copy written."""
    return Cost(comm=(Comm("all_gather", c["W"] * (c["P"] + 4)),),
                compute=(Compute(3 * c["P"] + c["W"] * c["P"], "vector"),), memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="fp8_allgather_params",
    title="FP8 parameter all-gather with delayed scaling (amax history)",
    description="Every rank holds flat_param_shard (P,), block r of the flat parameters (W*P,), and "
                "amax_history (16,) bf16, the past amaxes of its shard, oldest first. " + STATEMENT + " Every "
                "rank must return (full, updated_history): full (W*P,) in the shard's dtype, block r being q * s "
                "of rank r's shard (its own codes and scale), and its updated history (16,) bf16.",
    family="fsdp",
    parallelism="FSDP: FP8 all-gather of parameter shards with per-rank delayed scaling",
    pkb_id=53,
    origin="FSDP2 float8 all-gather (torchao) with Transformer Engine-style delayed scaling (amax history, "
           "scale = max(history) / 448)",
    inputs=(
        Tensor("flat_param_shard", ("W * P",), layout=Sharded(0), doc="this rank's shard of the flat parameters"),
        history_input("flat_param_shard"),
    ),
    outputs=(
        Output("full", ("W * P",), layout=Replicated(), doc="the dequantised parameters of every rank, rank order"),
        HISTORY_OUTPUT,
    ),
    golden=golden,
    cost=cost,
    # q * s (4 significant bits times 24) is exact in float64; rounded to fp32 first and then to a 16-bit
    # dtype it can land one step from the correctly rounded value (double rounding), under half of two
    # steps (the reference met none in 40 trials at W = 2, 4, 8). An fp8 step is 16 bf16 steps: a
    # candidate that skips the cast is far outside.
    tolerance_rule=Ulps(2, what="q * s rounded to the dtype (through fp32 or not)"),
    edges=edges("flat_param_shard"),
    clauses=clauses("flat_param_shard"),
    presets=shard_presets("4096 parameters a shard", 1 << 22,
                          "4M parameters a shard (4 MiB of fp8 codes a rank to gather): bandwidth-bound"),
    dtypes=DTYPES,
    departures=DEPARTURES + (
        "the reference ships the fp8 codes (as bytes: gloo has no fp8) and one fp32 scale per rank and "
        "dequantises after the gather, as FSDP's float8 all-gather does; PKB dequantises first and gathers "
        "the values in the dtype (the same values, twice the bytes)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('fp8_allgather_params')
