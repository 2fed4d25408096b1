"""fused_adam_grad_unshard_allgather: an Adam step on the local shard, then an all-gather of the updated
parameters (PKB 43).

ZeRO-1/2 and FSDP keep each rank's optimiser state for its shard of the flat parameters only: a rank
updates its shard with Adam, and the ranks all-gather the updated shards so that every rank holds the full
parameters for the next forward. Mixed precision as in training: gradients in the model's dtype, master
weights and both moments in fp32. The levers: fuse the elementwise Adam into one pass and start
sending each chunk of the updated shard as soon as it is computed (or write it straight into peers'
buffers).
"""
import math

from pkb_env.contract import (Comm, Compute, Const, Cost, Integers, Normal, Output, Positive, Relative,
                              Replicated, Scalar, Sharded, Sum, TaskSpec, Tensor)
from pkb_env.tasks._training import DTYPES, shard_presets
from pkb_env.tasks._clauses import own_blocks, sixteen_bit

LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


def golden(inputs, world):
    """The Adam step on the global flat parameters in float64, bias correction included, rounded once to
    fp32; the same on every rank."""
    first = inputs[0]
    lr, beta1, beta2, eps, step = (first[k] for k in ("lr", "beta1", "beta2", "eps", "step"))
    g = world.assemble(inputs, "grad_shard").double()
    m = beta1 * world.assemble(inputs, "exp_avg").double() + (1 - beta1) * g
    v = beta2 * world.assemble(inputs, "exp_avg_sq").double() + (1 - beta2) * g * g
    m_hat = m / (1 - math.pow(beta1, step))
    v_hat = v / (1 - math.pow(beta2, step))
    updated = world.assemble(inputs, "master_shard").double() - lr * m_hat / (v_hat.sqrt() + eps)
    return world.distribute(updated.float(), "params")


def cost(c):
    """Per rank: an all-gather of the updated fp32 shards (every rank needs every updated weight, and only
    the owner holds its shard's state); about 12 FLOPs an element of its shard; its four input shards
    read and the full parameters written once."""
    return Cost(comm=(Comm("all_gather", c.nbytes("params")),), compute=(Compute(12 * c["P"], "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="fused_adam_grad_unshard_allgather",
    title="Adam step on the local shard + all-gather of the updated parameters (ZeRO / FSDP unshard)",
    description="Every rank holds shard r (P,) of the flat gradient (W*P,) in the task dtype, and the same shard "
                "of the fp32 master weights, first moments exp_avg and second moments exp_avg_sq. With "
                "m = beta1 * exp_avg + (1 - beta1) * g and v = beta2 * exp_avg_sq + (1 - beta2) * g^2, a shard's "
                "updated weights are master - lr * m_hat / (sqrt(v_hat) + eps), with the bias corrections "
                "m_hat = m / (1 - beta1^step) and v_hat = v / (1 - beta2^step). Every rank must return the "
                "updated weights of every rank (W*P,) fp32, in rank order.",
    family="fsdp",
    parallelism="ZeRO / FSDP: sharded Adam step, then an all-gather (unshard) of the updated parameters",
    pkb_id=43,
    origin="ZeRO-1/2 (DeepSpeed) and FSDP sharded optimiser step: torch.optim.Adam's update on the local shard, "
           "then all_gather_into_tensor of the flat parameters",
    inputs=(
        Tensor("grad_shard", ("W * P",), layout=Sharded(0), doc="this rank's shard of the flat gradient"),
        Tensor("master_shard", ("W * P",), dtype="float32", layout=Sharded(0),
               doc="this rank's shard of the fp32 master weights"),
        Tensor("exp_avg", ("W * P",), dtype="float32", dist=Normal(std=0.2), layout=Sharded(0),
               doc="the first moments of this shard (as after many steps of unit-RMS gradients)"),
        Tensor("exp_avg_sq", ("W * P",), dtype="float32", dist=Positive(1.0), layout=Sharded(0),
               doc="the second moments of this shard"),
        Const("lr", LR, doc="learning rate"),
        Const("beta1", BETA1, doc="first-moment decay"),
        Const("beta2", BETA2, doc="second-moment decay"),
        Const("eps", EPS, doc="added to sqrt(v_hat)"),
        Scalar("step", Integers(1, 1001), doc="the step number, counted from 1 (sets the bias corrections)"),
    ),
    outputs=(Output("params", ("W * P",), dtype="float32", layout=Replicated(),
                    doc="every rank's updated fp32 weights, rank order"),),
    golden=golden,
    cost=cost,
    # The update, lr * m_hat / (sqrt(v_hat) + eps), is at most ~0.01 (m_hat up to a few tenths, sqrt(v_hat) down
    # to a few tenths in the tails) and takes about 8 fp32 roundings however it is arranged (PyTorch's
    # lr / bc1 and sqrt(v) / sqrt(bc2) included). Subtracting an inexact update from the weights can round
    # one fp32 step away from the correctly rounded result (the reference's worst element over 200 trials:
    # one ulp at |w| = 2.29, 0.41 of rtol 4u alone): Relative(1) keeps that under half. A forgotten bias
    # correction moves the update by a tenth of itself or more, ~1e-5 to 1e-4: far outside.
    tolerance_rule=(Sum(8, "0.01", "float32", what="the Adam update's fp32 roundings")
                    + Relative(1, "float32", what="the weights minus the update, rounded once more")),
    clauses=(own_blocks("grad_shard", "master_shard", what="every rank's shard is updated and gathered"),
             sixteen_bit("fp32_update", "m, v and the update in fp32 from a 16-bit gradient (fp32 master weights)")),
    presets=shard_presets("4096 parameters a shard, bf16 gradients", 1 << 22,
                          "4M parameters a shard (16 MiB of fp32 weights a rank to gather): bandwidth-bound"),
    dtypes=DTYPES,
    departures=(
        "every rank holds its own shard of random gradients, weights and moments from secret per-trial seeds "
        "(PKB seeds every rank as rank 0 and slices, so any rank can make every shard without communicating, "
        "and its moments are all zero, so the state never matters)",
        "the moments are drawn as after many steps (exp_avg normal with std 0.2, exp_avg_sq log-normal around "
        "1) and step is drawn per call in [1, 1000], so the bias corrections change the result on every call "
        "(PKB's step is 1 + trial % 7)",
        "master weights and moments are fp32 whatever the task dtype (only the gradient has it): in bf16 a "
        "1e-3 step is below the weights' resolution, so the update (and a forgotten bias correction) would "
        "vanish in rounding; the gathered weights are fp32",
        "the updated moments are not returned, as in PKB (the reference leaves its inputs unchanged)",
        "a `large` preset where the bytes gathered set the time (PKB's 4096 parameters a shard are "
        "latency-bound)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb("fused_adam_grad_unshard_allgather",
          differs="PKB's master weights and Adam's moments are in the run's dtype and its reference computes the step "
                  "in it; pkb-env's are fp32 whatever the task dtype and the step is computed in fp32 (in bfloat16 a "
                  "1e-3 step is below the weights' resolution), so a file that takes its dtype from the weights reads "
                  "a bfloat16 gradient as fp32 here",
          variant="pkb")
