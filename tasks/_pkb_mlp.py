"""PKB's statement of its MLP training steps (40 ddp, 41 and 42 ZeRO-1 and -2, 47 fsdp_step_e2e), for their `pkb`
variants (tasks/<name>/pkb/; docs/pkb_compat.md): PKB's model is relu(X W1^T + b1) W2^T + b2, pkb-env's SiLU
(tasks/_mlp_step.py says why), and PKB's ZeRO steps return the updated state only, not the flat gradient pkb-env's
return too; otherwise the step is the task's (the mapping makes PKB's returned state the task's in-place results).

A variant is the task with ReLU in its reference (tasks/<name>/pkb/reference.py) and in its golden (the task's own
golden, run with the float64 gradient of the ReLU model: `with_relu`), PKB's distributions (weights standard normal,
Adam's moments zero, the step 1 to 7, as PKB's harness draws them) and PKB's tolerance. PKB draws the weights on
rank 0 only (zeros elsewhere) and broadcasts them inside the call; here every rank holds the same replica, which PKB's
function leaves as it is (the broadcast is the identity then).
"""
from __future__ import annotations

import types
from dataclasses import replace

import torch

from pkb_env.contract import Custom, Integers, Normal, Scalar, TaskSpec
from pkb_env.tasks._pkb import PKB_VARIANT, pkb_rule, plain_clauses


def relu_gradient(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean squared error's gradient over the whole batch for PKB's ReLU model, float64, flattened in order."""
    ps = [p.double().requires_grad_(True) for p in params]
    out = torch.relu(x.double() @ ps[0].T + ps[1]) @ ps[2].T + ps[3]
    loss = ((out - y.double()) ** 2).mean()
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, ps)])


def with_relu(golden):
    """The task's own golden, its `full_gradient` the ReLU model's (the same code, another gradient)."""
    return types.FunctionType(golden.__code__, {**golden.__globals__, "full_gradient": relu_gradient},
                              golden.__name__, golden.__defaults__, golden.__closure__)


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


def relu_variant(spec: TaskSpec, weights: tuple[str, ...], moments: tuple[str, ...],
                 state_only_outputs: bool = False) -> TaskSpec:
    """The variant of the MLP step `spec`: `weights` and `moments` name its parameter and moment inputs;
    `state_only_outputs`: PKB's step returns only the updated state (ZeRO-1 and -2), not the task's flat gradient."""
    def drawn(decl):
        if decl.name in weights:
            return replace(decl, dist=Normal())
        if decl.name in moments:
            return replace(decl, dist=ZEROS)
        if isinstance(decl, Scalar) and decl.name == "step":
            return replace(decl, dist=Integers(1, 8))
        return decl

    outputs = tuple(replace(o, tolerance=None) for o in spec.outputs if o.inplace or not state_only_outputs)
    golden = with_relu(spec.golden)
    return replace(spec, name=f"pkb_env.tasks.{spec.name}.pkb",
                   title=f"PKB {spec.pkb_id} as PKB states it: {spec.title}",
                   description=spec.description.replace("silu(", "relu("), inputs=tuple(drawn(d) for d in spec.inputs),
                   outputs=outputs, edges=(), clauses=plain_clauses(spec),
                   golden=state_only(golden, spec.outputs) if state_only_outputs else golden,
                   tolerance_rule=pkb_rule(spec.dtypes),
                   departures=(PKB_VARIANT, "ReLU, as PKB's model (pkb-env's task uses SiLU)",
                               "the weights are the same replica on every rank (PKB draws them on rank 0 and "
                               "broadcasts them in the call: the same function on a replica), standard normal; the "
                               "moments zero and the step 1 to 7, as PKB's harness draws them"),
                   reference_path=None, pkb=None)
