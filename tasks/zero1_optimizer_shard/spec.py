"""zero1_optimizer_shard: one ZeRO-1 training step of a two-layer MLP (PKB 41).

ZeRO stage 1 (DeepSpeed) partitions only the optimizer state: every rank holds the whole model and the whole
averaged gradient, as in data parallelism, but Adam's moments of its 1/W shard of the flat parameters only.
A step: forward and backward on the rank's own rows, an all-reduce of the flat gradient, Adam on the rank's
shard, and an all-gather of the updated shards so that every replica of the parameters is updated. The
levers: overlap the gradient all-reduce with the backward (bucket by layer, last layer first), fuse the
elementwise Adam into one pass, start gathering each chunk of the updated shard as soon as it is computed.
"""
import torch

from pkb_env.contract import Comm, Compute, Cost, Output, Replicated, Sharded, TaskSpec, Tensor
from pkb_env.tasks._mlp_step import (DTYPES, FIRST_MOMENT, MLP_STATE_DEPARTURES, NAMES, P, SECOND_MOMENT, SHAPES,
                                     WEIGHTS, adam, flat_params, full_gradient, grad_tolerance, hyper,
                                     param_tolerance, presets, sharded_adam_state, split, step_flops)
from pkb_env.tasks._clauses import own_blocks, sixteen_bit


def golden(inputs, world):
    """The step on the whole batch in float64: the mean squared error's gradient over all N rows, Adam with
    bias correction on the flat parameters, each state rounded once to fp32 and written back."""
    params = {name: world.assemble(inputs, name) for name in NAMES}
    grad = full_gradient(list(params.values()), world.assemble(inputs, "X"), world.assemble(inputs, "y"))
    flat = torch.cat([p.reshape(-1) for p in params.values()])
    new, m, v = adam(flat, grad, world.assemble(inputs, "exp_avg_part"), world.assemble(inputs, "exp_avg_sq_part"),
                     inputs[0])
    for name, value in split(new, params).items():
        world.update(inputs, name, value.float())
    world.update(inputs, "exp_avg_part", m.float())
    world.update(inputs, "exp_avg_sq_part", v.float())
    return world.distribute(grad.float(), "grad")


def cost(c):
    """Per rank: the averaged gradient must reach every rank (an all-reduce of P fp32 values), and the
    updated shards every rank (an all-gather of P fp32 values, after it: only the owner holds a shard's
    moments); the forward and backward on N/W rows; Adam's ~12 FLOPs on each of its P/W values; every
    input read and every output (the parameters, its moments, the gradient) written once."""
    p = flat_params(c)
    return Cost(comm=(Comm("all_reduce", 4 * p), Comm("all_gather", 4 * p)),
                compute=(Compute(step_flops(c), "matmul"), Compute(12 * p / c["W"], "vector")),
                memory_bytes=c.io_bytes())


def _param(name):
    return Tensor(name, SHAPES[name], dtype="float32", dist=WEIGHTS, layout=Replicated(),
                  doc=f"the fp32 parameter {name} (every rank's replica); updated in place")


SPEC = TaskSpec(
    name="zero1_optimizer_shard",
    title="ZeRO-1 step: all-reduce of gradients, Adam on the local shard of the optimizer state, all-gather",
    description="A two-layer MLP out = silu(X W1^T + b1) W2^T + b2, loss the mean squared error against y over "
                "the whole batch. Every rank holds its rows X (N/W, D), y (N/W, O) in the task dtype, the same "
                "fp32 parameters W1 (H, D), b1 (H,), W2 (O, H), b2 (O,), and the fp32 Adam moments exp_avg_part, "
                "exp_avg_sq_part of its shard r (P/W values) of the flat parameters (W1, b1, W2, b2 flattened "
                "and concatenated, P = H*D + H + O*H + O). Forward and backward in fp32; the gradient "
                "averaged over the ranks; Adam with bias correction (m = beta1 m + "
                "(1 - beta1) g, v = beta2 v + (1 - beta2) g^2, w -= lr * (m / (1 - beta1^step)) / "
                "(sqrt(v / (1 - beta2^step)) + eps)) on shard r, its moments updated in place; every rank's "
                "W1, b1, W2, b2 updated in place to the new parameters. Returns the averaged flat gradient (P,).",
    family="fsdp",
    parallelism="ZeRO stage 1: data parallel with the optimizer state sharded (all-reduce, sharded Adam, all-gather)",
    pkb_id=41,
    origin="DeepSpeed ZeRO stage 1 / torch.distributed.optim.ZeroRedundancyOptimizer: DDP's gradient "
           "all-reduce, Adam on the rank's partition, all_gather_into_tensor of the updated flat parameters",
    inputs=(
        Tensor("X", ("N", "D"), layout=Sharded(0), doc="this rank's rows of the batch's inputs"),
        Tensor("y", ("N", "O"), layout=Sharded(0), doc="this rank's rows of the targets"),
        *(_param(name) for name in NAMES),
        Tensor("exp_avg_part", (P,), dtype="float32", dist=FIRST_MOMENT, layout=Sharded(0),
               doc="Adam's first moments of this rank's shard of the flat parameters; updated in place"),
        Tensor("exp_avg_sq_part", (P,), dtype="float32", dist=SECOND_MOMENT, layout=Sharded(0),
               doc="Adam's second moments of this rank's shard; updated in place"),
        *hyper(),
    ),
    outputs=(
        Output("grad", (P,), dtype="float32", layout=Replicated(), tolerance=grad_tolerance(),
               doc="the flat gradient averaged over the ranks (of the mean loss over the whole batch)"),
        *sharded_adam_state(),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=param_tolerance(),
    clauses=(own_blocks("X", "y", what="the gradient averages every rank's rows"),
             sixteen_bit("fp32_compute", "forward and backward in fp32 from rows in the task dtype (a 16-bit "
                         "forward rounds every activation)")),
    presets=presets(),
    dtypes=DTYPES,
    departures=(
        "every rank draws its own rows of the batch and its own shard of the moments from secret per-call seeds, "
        "and the parameters are drawn replicated (PKB seeds every rank as rank 0 and slices, so any rank can "
        "make every rank's data; its parameters are random on rank 0 and zero elsewhere, made equal by a "
        "broadcast inside the call, which a real step does once at start-up: it is gone from the call)",
        "the state is drawn as after many steps (weights at 1/sqrt(fan-in), moments at the gradients' scale, "
        "step per call in [1, 1000]) so that the gradient, both moments and the bias corrections all change "
        "the result (PKB's moments are zero and its step is 1 + trial % 7)",
        *MLP_STATE_DEPARTURES,
        "the parameters and this shard's moments are updated in place (the judge compares them after the "
        "call; the parameters must be bit-identical on every rank) instead of returned as copies",
        "the averaged flat gradient is returned: ZeRO-1 leaves it on every rank (only the optimizer state is "
        "partitioned), which is what separates this task from ZeRO-2 (42), whose ranks keep their shard of it",
        "the flat parameters must split evenly over the ranks (P = 262912 at bench: W = 2, 4, 8); PKB widens "
        "the hidden layer until they do",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import RELU  # noqa: E402

PKB = Pkb('zero1_optimizer_shard', params=(Arg("X_local", "X"), Arg("y_local", "y"), *(Arg(n) for n in (
              "W1", "b1", "W2", "b2", "exp_avg_part", "exp_avg_sq_part", "lr", "beta1", "beta2", "eps", "step"))),
          differs=RELU + "; and pkb-env also returns the flat gradient the step used (grad) "
                  "and updates the parameters and moments in place; PKB returns the six updated tensors",
          unmapped="PKB's solution does not return the flat gradient this task checks", variant="pkb")
