"""fp8_reduce_scatter_grads: FP8 gradient reduce-scatter with delayed scaling (PKB 52).

FSDP/ZeRO-2 gradient reduction with Transformer Engine's delayed scaling: every rank's full gradient is
cast to float8_e4m3fn with a scale from its amax history, and the ranks reduce-scatter the values those
codes stand for, so each rank keeps the mean of its shard. The reference dequantises before a reduce-
scatter in the dtype. The lever: ship the fp8 codes and one scale (an all-to-all of a byte an element),
sum the dequantised blocks locally, and fuse the amax, the cast and the sum.

Each rank keeps its own history and scale (as PKB: no amax reduction across ranks), so a receiver needs
every sender's scale with its codes.
"""
from pkb_env.contract import Comm, Compute, Cost, Output, Rounded, Sharded, Sum, TaskSpec, Tensor
from pkb_env.tasks._delayed_fp8 import (DEPARTURES, HISTORY_OUTPUT, STATEMENT, clauses, delayed_scaling, edges,
                                       history_input)
from pkb_env.tasks._training import DTYPES, shard_presets


def golden(inputs, world):
    """Every rank's values as defined (fp8 codes from its own history and amax), averaged in float64 and
    rounded once; rank r gets block r of the mean and its own updated history."""
    total, histories = 0, []
    for args in inputs:
        values, history = delayed_scaling(args["flat_grads"], args["amax_history"])
        total = total + values
        histories.append(history)
    mean = (total / world.world_size).to(inputs[0]["flat_grads"].dtype)
    return list(zip(world.distribute(mean, "out"), histories))


def cost(c):
    """Per rank: each peer needs this rank's fp8 codes for its block and the scale (an all-to-all of one
    byte a value, W*P values, plus 4 bytes a destination), then a local sum; the amax, the cast and the
    dequantise-and-add are about 5 FLOPs a value; the gradient read and the shard written once."""
    n = c["W"] * c["P"]
    return Cost(comm=(Comm("all_to_all", n + 4 * c["W"]),), compute=(Compute(5 * n, "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="fp8_reduce_scatter_grads",
    title="FP8 gradient reduce-scatter with delayed scaling (amax history)",
    description="Every rank holds its own full flat gradient flat_grads (W*P,) and amax_history (16,) bf16, "
                "the past amaxes of its gradient, oldest first. " + STATEMENT + " Rank r must return "
                "(out, updated_history): out (P,) in flat_grads' dtype, the mean over ranks of values "
                "[r*P, (r+1)*P) of q * s (each rank's own codes and scale), and its updated history (16,) bf16.",
    family="fsdp",
    parallelism="FSDP / ZeRO-2: FP8 gradient reduce-scatter with per-rank delayed scaling",
    pkb_id=52,
    origin="Transformer Engine delayed scaling (amax history, scale = max(history) / 448) on an FSDP/ZeRO "
           "gradient reduce-scatter",
    inputs=(
        Tensor("flat_grads", ("W * P",), doc="this rank's full flattened gradient"),
        history_input("flat_grads"),
    ),
    outputs=(
        Output("out", ("W * P",), layout=Sharded(0), doc="this rank's block of the mean over ranks"),
        HISTORY_OUTPUT,
    ),
    golden=golden,
    cost=cost,
    # The codes are defined exactly; what rounds is each rank's q * s in the dtype (W values of RMS 1,
    # divided by W after the sum) and the reduce-scatter's W-term sum in the dtype. Kept near the
    # roundings of the dtype: an fp8 step is ~16 bf16 steps, so skipping the cast stays outside it.
    tolerance_rule=(Rounded("W", "1 / W", what="each rank's q * s rounded to the dtype, then averaged")
                    + Sum("W", "1 / W", "dtype", what="the reduce-scatter's sum in the dtype, divided by W")),
    edges=edges("flat_grads"),
    clauses=clauses("flat_grads"),
    presets=shard_presets("4096 values a shard, W * 4096 a rank", 1 << 20,
                          "1M values a shard (2 MiB of bf16), W * 2 MiB of gradient a rank: bandwidth-bound"),
    dtypes=DTYPES,
    departures=DEPARTURES,
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('fp8_reduce_scatter_grads')
