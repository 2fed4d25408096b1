"""PKB 43 (fused_adam_grad_unshard_allgather) as PKB states it (docs/pkb_compat.md): every tensor in the run's dtype,
the master weights and Adam's moments too, and the step computed in it, as PKB's harness passes them and PKB's
reference computes; PKB's distributions (weights standard normal, moments zero, the step 1 to 7) and tolerance.

pkb-env's task keeps fp32 master weights and moments on purpose (in bfloat16 a 1e-3 step is below the weights'
resolution: its spec says why). A PKB file written for PKB's harness takes its dtype from the weights and reads every
tensor in it: at bfloat16 pkb-env's fp32 master weights made Claude Opus 4.7's 44 read its bfloat16 gradient as float
("expected scalar type Float but found BFloat16", one H100), a file PKB's harness runs. Not in float16: there Adam's
second moments (1e-3 g^2) underflow for small gradients and eps (1e-8) is zero, so PKB's own reference divides by
zero (as for PKB's MLP steps: tasks/_pkb_mlp.py)."""
import math
from dataclasses import replace

from pkb_env.contract import TASK_DTYPE, Integers, Normal, Scalar
from pkb_env.tasks._pkb import PKB_VARIANT, pkb_rule, plain_clauses
from pkb_env.tasks._pkb_mlp import ZEROS
from pkb_env.tasks.fused_adam_grad_unshard_allgather import spec as task

DRAWS = {"master_shard": Normal(), "exp_avg": ZEROS, "exp_avg_sq": ZEROS}


def golden(inputs, world):
    """PKB's step in the inputs' dtype, with PKB's reference's operations in its order (each one rounded to the
    dtype), on the global flat vectors (elementwise: the same values as each rank's on its shard); the same on
    every rank."""
    first = inputs[0]
    lr, beta1, beta2, eps, step = (first[k] for k in ("lr", "beta1", "beta2", "eps", "step"))
    g = world.assemble(inputs, "grad_shard")
    m = world.assemble(inputs, "exp_avg").mul(beta1).add_(g, alpha=1.0 - beta1)
    v = world.assemble(inputs, "exp_avg_sq").mul(beta2).addcmul_(g, g, value=1.0 - beta2)
    m_hat = m / (1.0 - math.pow(beta1, step))
    v_hat = v / (1.0 - math.pow(beta2, step))
    updated = world.assemble(inputs, "master_shard").add(m_hat.div(v_hat.sqrt().add(eps)).mul(-lr))
    return world.distribute(updated, "params")


def drawn(decl):
    if decl.name in DRAWS:
        return replace(decl, dtype=TASK_DTYPE, dist=DRAWS[decl.name])
    if isinstance(decl, Scalar) and decl.name == "step":
        return replace(decl, dist=Integers(1, 8))
    return decl


DTYPES = tuple(d for d in task.SPEC.dtypes if d != "float16")
SPEC = replace(
    task.SPEC, name="pkb_env.tasks.fused_adam_grad_unshard_allgather.pkb",
    title=f"PKB {task.SPEC.pkb_id} as PKB states it: {task.SPEC.title}",
    description="Every rank holds shard r (P,) of the flat gradient, of the master weights, of the first moments "
                "exp_avg and of the second moments exp_avg_sq, every tensor in the task dtype, in which the step "
                "runs (as PKB's reference runs it). With m = beta1 * exp_avg + (1 - beta1) * g and "
                "v = beta2 * exp_avg_sq + (1 - beta2) * g^2, a shard's updated weights are "
                "master - lr * m_hat / (sqrt(v_hat) + eps), with the bias corrections m_hat = m / (1 - beta1^step) "
                "and v_hat = v / (1 - beta2^step). Every rank must return the updated weights of every rank (W*P,) "
                "in the task dtype, in rank order; outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) are "
                "correct.",
    inputs=tuple(drawn(d) for d in task.SPEC.inputs),
    outputs=tuple(replace(o, dtype=TASK_DTYPE, tolerance=None) for o in task.SPEC.outputs),
    edges=(), clauses=plain_clauses(task.SPEC), golden=golden, dtypes=DTYPES, tolerance_rule=pkb_rule(DTYPES),
    departures=(PKB_VARIANT,
                "the master weights and Adam's moments in the task dtype and the step computed in it, as PKB's "
                "harness passes them and PKB's reference computes (pkb-env's task keeps them in fp32)",
                "not in float16: there Adam's second moments underflow for small gradients and eps (1e-8) is zero, "
                "so PKB's own reference divides by zero",
                "the weights standard normal, the moments zero and the step 1 to 7, as PKB's harness draws them"),
    reference_path=None, pkb=None)
PKB = replace(task.PKB, differs="", variant=None)
