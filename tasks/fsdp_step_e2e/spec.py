"""fsdp_step_e2e: one FSDP training step with AdamW of a two-layer MLP, end to end (PKB 47).

Fully sharded data parallelism (ZeRO-3): every rank holds only its 1/W shard of the flat parameters and of
the optimizer state. A step all-gathers the parameters for the forward and backward, reduce-scatters the
gradients so that each rank holds its shard of their average, and runs AdamW on its shard. The levers:
gather and reduce layer by layer so that communication overlaps compute (prefetch the next layer's
parameters, reduce-scatter a layer's gradients as soon as the backward produces them), and fuse AdamW into
the reduce-scatter's epilogue.
"""
import torch

from pkb_env.contract import Comm, Compute, Const, Cost, Custom, InPlace, Sharded, TaskSpec, Tensor
from pkb_env.tasks._mlp_step import (DTYPES, FIRST_MOMENT, MLP_STATE_DEPARTURES, P, SECOND_MOMENT, SHAPES, adam,
                                     flat_params, full_gradient, hyper, moment_tolerance, param_tolerance, presets,
                                     second_moment_tolerance, split, step_flops)
from pkb_env.tasks._clauses import own_blocks, sixteen_bit


def _flat_weights(gen, shape, dtype, env):
    """Normal with std 1/sqrt(D), the first layer's fan-in (a shard does not know where in the flat
    parameters it starts)."""
    return (torch.randn(shape, generator=gen, device=gen.device) / env["D"] ** 0.5).to(dtype)


def golden(inputs, world):
    """The step on the whole batch in float64: the mean squared error's gradient over all N rows at the
    gathered parameters, AdamW with bias correction on the flat parameters, each state rounded once to fp32
    and written back into every rank's shard; returns None."""
    flat = world.assemble(inputs, "flat_param_shard")
    like = {name: torch.empty([world[d] for d in shape]) for name, shape in SHAPES.items()}
    params = split(flat, like)
    grad = full_gradient(list(params.values()), world.assemble(inputs, "X"), world.assemble(inputs, "y"))
    new, m, v = adam(flat, grad, world.assemble(inputs, "exp_avg_shard"), world.assemble(inputs, "exp_avg_sq_shard"),
                     inputs[0], decay=inputs[0]["weight_decay"])
    world.update(inputs, "flat_param_shard", new.float())
    world.update(inputs, "exp_avg_shard", m.float())
    world.update(inputs, "exp_avg_sq_shard", v.float())
    return [None] * world.world_size


def cost(c):
    """Per rank: the parameters for the forward (an all-gather of P fp32 values), its shard of the averaged
    gradient (a reduce-scatter of P fp32 values, after the backward); the forward and backward on N/W rows;
    AdamW's ~14 FLOPs on each of its P/W values; every input read and every shard written once."""
    p = flat_params(c)
    return Cost(comm=(Comm("all_gather", 4 * p), Comm("reduce_scatter", 4 * p)),
                compute=(Compute(step_flops(c), "matmul"), Compute(14 * p / c["W"], "vector")),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="fsdp_step_e2e",
    title="FSDP step end to end: all-gather the parameters, forward and backward, reduce-scatter, AdamW on the shard",
    description="A two-layer MLP out = silu(X W1^T + b1) W2^T + b2, loss the mean squared error against y over "
                "the whole batch. Every rank holds its rows X (N/W, D), y (N/W, O) in the task dtype and its "
                "shard r (P/W values, fp32) of the flat parameters (W1 (hidden, D), b1 (hidden,), W2 (O, hidden), "
                "b2 (O,) flattened and concatenated, P = H*D + H + O*H + O) and of Adam's moments. Forward and "
                "backward in fp32 at the gathered parameters; the gradient averaged over the ranks; AdamW with "
                "bias correction (m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2, p = p (1 - lr wd) "
                "- lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)) updates this rank's shard "
                "of the parameters and of both moments in place. Returns None.",
    family="fsdp",
    parallelism="FSDP / ZeRO-3: parameters, gradients and optimizer state sharded (all-gather, reduce-scatter)",
    pkb_id=47,
    origin="torch.distributed.fsdp (FlatParameter: all_gather_into_tensor before the forward, "
           "reduce_scatter_tensor of the gradients after the backward) with torch.optim.AdamW on the local shard",
    inputs=(
        Tensor("X", ("N", "D"), layout=Sharded(0), doc="this rank's rows of the batch's inputs"),
        Tensor("y", ("N", "O"), layout=Sharded(0), doc="this rank's rows of the targets"),
        Tensor("flat_param_shard", (P,), dtype="float32", layout=Sharded(0),
               dist=Custom(_flat_weights, "normal with std 1/sqrt(D)"),
               doc="this rank's shard of the fp32 flat parameters; updated in place"),
        Tensor("exp_avg_shard", (P,), dtype="float32", dist=FIRST_MOMENT, layout=Sharded(0),
               doc="Adam's first moments of this shard; updated in place"),
        Tensor("exp_avg_sq_shard", (P,), dtype="float32", dist=SECOND_MOMENT, layout=Sharded(0),
               doc="Adam's second moments of this shard; updated in place"),
        Const("hidden", dim="H", doc="the hidden width H (D and O are X's and y's widths)"),
        *hyper(weight_decay=True),
    ),
    outputs=(
        InPlace("flat_param_shard", tolerance=param_tolerance(), doc="this rank's parameter shard after the step"),
        InPlace("exp_avg_shard", tolerance=moment_tolerance(), doc="this shard's first moments after the step"),
        InPlace("exp_avg_sq_shard", tolerance=second_moment_tolerance(),
                doc="this shard's second moments after the step"),
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
        "every rank draws its own rows of the batch and its own shards of the parameters and moments from "
        "secret per-call seeds (PKB seeds every rank as rank 0 and slices, so any rank can make every shard; "
        "its parameters are zero outside rank 0's shard and its moments zero)",
        "the state is drawn as after many steps (weights at 1/sqrt(D), moments at the gradients' scale, step "
        "per call in [1, 1000]) so that the gradient, both moments and the bias corrections all change the "
        "result (PKB's step is 1 + trial % 7)",
        *MLP_STATE_DEPARTURES,
        "the shards of the parameters and moments are updated in place (the judge compares them after the "
        "call) instead of returned as copies",
        "the hidden width is passed as an int instead of PKB's tuple of the four parameter shapes (D and O "
        "are the widths of X and y)",
        "the flat parameters must split evenly over the ranks (P = 262912 at bench: W = 2, 4, 8); PKB widens "
        "the hidden layer until they do",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Computed, Pkb, Ret  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import RELU  # noqa: E402


def _pkb_param_shapes(call):
    """PKB passes the shapes of W1, b1, W2, b2; this task passes the hidden width H (D and O: X's and y's widths)."""
    hidden, d_in, d_out = call.values["hidden"], call.values["X"].shape[1], call.values["y"].shape[1]
    return ((hidden, d_in), (hidden,), (d_out, hidden), (d_out,))


PKB = Pkb("fsdp_step_e2e",
          params=(Arg("X_local", "X"), Arg("y_local", "y"), Arg("flat_param_shard"),
                  Computed("param_shapes", _pkb_param_shapes, "((H, D), (H,), (O, H), (O,))"), Arg("exp_avg_shard"),
                  Arg("exp_avg_sq_shard"), Arg("lr"), Arg("beta1"), Arg("beta2"), Arg("eps"), Arg("weight_decay"),
                  Arg("step")),
          returns=(Ret("flat_param_shard"), Ret("exp_avg_shard"), Ret("exp_avg_sq_shard")), differs=RELU,
          variant="pkb")
