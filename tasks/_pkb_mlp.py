"""PKB's statement of its MLP training steps (40 ddp, 41 and 42 ZeRO-1 and -2, 47 fsdp_step_e2e), for their `pkb`
variants (tasks/<name>/pkb/; docs/pkb_compat.md): PKB's model is relu(X W1^T + b1) W2^T + b2, pkb-env's SiLU
(tasks/_mlp_step.py says why); PKB's every tensor is in the run's dtype, the parameters and Adam's moments too, and
PKB's reference computes the step in it (pkb-env keeps fp32 master weights and moments and computes in fp32); and
PKB's ZeRO steps return the updated state only, not the flat gradient pkb-env's return too. Otherwise the step is
the task's (the mapping makes PKB's returned state the task's in-place results).

A variant is the task with ReLU and the inputs' dtype in its reference (tasks/<name>/pkb/reference.py) and in its
golden (the task's own golden, run with `pkb_gradient` and `pkb_adam`: the step computed as PKB's reference computes
it, in the inputs' dtype, each rank's gradient on its rows summed over the ranks in rank order), PKB's distributions
(weights standard normal, Adam's moments zero, the step 1 to 7, as PKB's harness draws them) and PKB's tolerance.
In bfloat16 the golden follows PKB's roundings, as PKB's check does (it compares with its reference's bf16 result).
PKB draws the weights on rank 0 only (zeros elsewhere) and broadcasts them inside the call; here every rank holds
the same replica, which PKB's function leaves as it is (the broadcast is the identity then).
"""
from __future__ import annotations

import math
import re
import types
from dataclasses import replace

import torch
import torch.nn.functional as F

from pkb_env.contract import TASK_DTYPE, Custom, Integers, Normal, Scalar, TaskSpec
from pkb_env.tasks._pkb import PKB_VARIANT, pkb_rule, plain_clauses


def pkb_gradient(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, ranks: int) -> torch.Tensor:
    """The mean squared error's gradient over the whole batch for PKB's ReLU model, flattened in parameter order,
    computed as PKB's reference computes it: in the inputs' dtype, each of the `ranks` row blocks' gradient of its
    own mean, summed in rank order (the all-reduce) and divided by `ranks`."""
    total = None
    for xs, ys in zip(x.chunk(ranks), y.chunk(ranks)):
        ps = [p.detach().clone().requires_grad_(True) for p in params]
        F.mse_loss(F.linear(F.relu(F.linear(xs, ps[0], ps[1])), ps[2], ps[3]), ys).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in ps])
        total = flat if total is None else total.add_(flat)
    return total.div_(ranks)


def pkb_adam(param, grad, m, v, first, decay: float = 0.0):
    """One Adam(W) step with bias correction in the inputs' dtype, rounded as PKB's references round it:
    (new param, new m, new v). `first` holds lr, beta1, beta2, eps and step; `decay`: decoupled weight decay, taken
    from the parameter before the step (PKB 47)."""
    lr, b1, b2, eps, step = (first[k] for k in ("lr", "beta1", "beta2", "eps", "step"))
    m = m.mul(b1).add_(grad, alpha=1.0 - b1)
    v = v.mul(b2).addcmul_(grad, grad, value=1.0 - b2)
    update = (m / (1.0 - math.pow(b1, step))).div((v / (1.0 - math.pow(b2, step))).sqrt().add(eps))
    new = param.add(update, alpha=-lr)
    return (new.add_(param, alpha=-lr * decay) if decay else new), m, v


def as_pkb(golden):
    """The task's own golden with its `full_gradient` and `adam` PKB's (the same code, PKB's step in the dtype)."""
    def stepped(inputs, world):
        def gradient(params, x, y):
            return pkb_gradient(params, x, y, world.world_size)
        code = types.FunctionType(golden.__code__, {**golden.__globals__, "full_gradient": gradient,
                                                    "adam": pkb_adam},
                                  golden.__name__, golden.__defaults__, golden.__closure__)
        return code(inputs, world)
    return stepped


def _zeros(gen, shape, dtype, env):
    return torch.zeros(shape, dtype=dtype, device=gen.device)


ZEROS = Custom(_zeros, "zeros (PKB's Adam state before its first step)", kinds=frozenset({"float"}))


def state_only(golden, outputs: tuple):
    """A golden that updates the state as the task's `golden` does (run with the task's `outputs`) and returns
    nothing (PKB's ZeRO steps return the state, which the mapping copies in place; pkb-env's tasks also return the
    flat gradient, which PKB's do not)."""
    def updated(inputs, world):
        golden(inputs, replace(world, outputs=outputs))
        return [None] * world.world_size
    return updated


def in_dtype_cost(cost):
    """The task's cost with its collectives' bytes in the task dtype: the task moves fp32 state (4 bytes a value),
    PKB's state is in the run's dtype."""
    def scaled(c):
        base = cost(c)
        return replace(base, comm=tuple(replace(t, size_bytes=t.size_bytes * c.elem / 4) for t in base.comm))
    return scaled


def pkb_description(spec: TaskSpec, state_only_outputs: bool) -> str:
    """The task's description as PKB states the step: ReLU, every tensor and the step in the task dtype, and (ZeRO)
    nothing returned. Fails where the task's wording changed and a replacement no longer applies."""
    text = spec.description.replace("silu(", "relu(")
    text, done = re.subn(r"Forward and backward in fp32",
                         "Every tensor (the parameters and moments too) in the task dtype, and the forward, backward "
                         "and Adam computed in it as PKB's reference does", text)
    text = re.sub(r"\bfp32 |, fp32\b", "", text)
    if state_only_outputs:
        text, returned = re.subn(r"Returns (shard r of )?the averaged flat gradient \(P(/W)?,\)\.",
                                 "Returns None (PKB's step returns the updated state, read in place).", text)
        done = done and returned
    if not done or "fp32" in text:
        raise ValueError(f"{spec.name}: its description no longer reads as pkb_description expects: {text}")
    return text


def relu_variant(spec: TaskSpec, weights: tuple[str, ...], moments: tuple[str, ...],
                 state_only_outputs: bool = False) -> TaskSpec:
    """The variant of the MLP step `spec`: `weights` and `moments` name its parameter and moment inputs (in the
    task dtype, as PKB's); `state_only_outputs`: PKB's step returns only the updated state (ZeRO-1 and -2), not the
    task's flat gradient."""
    def drawn(decl):
        if decl.name in weights:
            return replace(decl, dtype=TASK_DTYPE, dist=Normal())
        if decl.name in moments:
            return replace(decl, dtype=TASK_DTYPE, dist=ZEROS)
        if isinstance(decl, Scalar) and decl.name == "step":
            return replace(decl, dist=Integers(1, 8))
        return decl

    state = (*weights, *moments)   # updated in place: the outputs take the inputs' dtype
    outputs = tuple(replace(o, tolerance=None, dtype=TASK_DTYPE if o.name in state else o.dtype)
                    for o in spec.outputs if o.inplace or not state_only_outputs)
    golden = as_pkb(spec.golden)
    dtypes = tuple(d for d in spec.dtypes if d != "float16")
    return replace(spec, name=f"pkb_env.tasks.{spec.name}.pkb",
                   title=f"PKB {spec.pkb_id} as PKB states it: {spec.title}",
                   description=pkb_description(spec, state_only_outputs), inputs=tuple(drawn(d) for d in spec.inputs),
                   outputs=outputs, edges=(), clauses=plain_clauses(spec),
                   golden=state_only(golden, spec.outputs) if state_only_outputs else golden,
                   cost=in_dtype_cost(spec.cost), dtypes=dtypes, tolerance_rule=pkb_rule(dtypes),
                   departures=(PKB_VARIANT, "ReLU, as PKB's model (pkb-env's task uses SiLU)",
                               "the parameters and Adam's moments in the task dtype and the step computed in it, as "
                               "PKB's harness passes them and PKB's reference computes (pkb-env's task keeps them in "
                               "fp32 and computes in fp32)",
                               "not in float16: there Adam's second moments (1e-3 g^2) underflow to zero and eps "
                               "(1e-8) is zero, so PKB's own reference divides by zero",
                               "the weights are the same replica on every rank (PKB draws them on rank 0 and "
                               "broadcasts them in the call: the same function on a replica), standard normal; the "
                               "moments zero and the step 1 to 7, as PKB's harness draws them"),
                   reference_path=None, pkb=None)
