"""contract_v3_tasks.adam_step (an example spec outside the suite): state updated in place and outputs that are not
plain tensors, judged end to end (tests/contract/test_output_kinds.py; docs/task_contract.md, "State updated in place"
and "Outputs").

A data-parallel Adam step with gradient clipping: param, exp_avg and exp_avg_sq are InPlace (compared after
the call; param's replicas bit-identical), the gradient norm is a Python float every rank returns
identically, the second slot is always None, and rank 0 alone returns a dict with an integer count.
"""

import torch

from pkb_env.contract import (Comm, Const, Cost, InPlace, Integers, Normal, OnRanks, Output, PerRank, Positive, Preset,
                              Relative, Replicated, Scalar, Sum, TaskSpec, Tensor)


def golden(inputs, world):
    """The step on the averaged gradient in float64, each state rounded once, written back into the inputs."""
    first = inputs[0]
    dtype = first["param"].dtype
    g = torch.stack([args["grad"].double() for args in inputs]).mean(0)
    norm = float(torch.linalg.vector_norm(g))
    g = g * min(1.0, first["max_norm"] / (norm + 1e-6))
    b1, b2, step = first["beta1"], first["beta2"], first["step"]
    m = first["exp_avg"].double() * b1 + (1 - b1) * g
    v = first["exp_avg_sq"].double() * b2 + (1 - b2) * g * g
    update = first["lr"] * (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + first["eps"])
    world.update(inputs, "param", (first["param"].double() - update).to(dtype))
    world.update(inputs, "exp_avg", m.to(dtype))
    world.update(inputs, "exp_avg_sq", v.to(dtype))
    stats = {"clipped": int(norm > first["max_norm"]), "max_update": update.abs().max().to(dtype)}
    return [(norm, None, stats if rank == 0 else None) for rank in range(world.world_size)]


def cost(c):
    return Cost(comm=(Comm("all_reduce", c.nbytes("grad")),), memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="contract_v3_tasks.adam_step",
    title="Data-parallel Adam step (contract test)",
    description="Average the ranks' gradients, clip to max_norm, update exp_avg, exp_avg_sq and param in place.",
    family="tensor",
    pkb_id=None,
    origin="tests: contract v3 (InPlace, scalar, none, dict, OnRanks, identical)",
    inputs=(
        Tensor("param", ("N",), layout=Replicated(), doc="the parameters (every rank's replica)"),
        Tensor("grad", ("N",), layout=PerRank(), doc="this rank's gradient"),
        Tensor("exp_avg", ("N",), dist=Normal(std=0.1), layout=Replicated(), doc="Adam's first moment"),
        Tensor("exp_avg_sq", ("N",), dist=Positive(0.01), layout=Replicated(), doc="Adam's second moment"),
        Scalar("step", Integers(1, 100), doc="the step number (bias correction)"),
        Const("lr", 1e-2), Const("beta1", 0.9), Const("beta2", 0.999), Const("eps", 1e-8), Const("max_norm", 1.0),
    ),
    outputs=(
        Output("norm", kind="scalar", layout=Replicated(), identical=True,
               doc="the averaged gradient's L2 norm before clipping"),
        Output("aux", kind="none", doc="no auxiliary loss"),
        Output("stats", layout=Replicated(), only_on=OnRanks(world=0), doc="statistics, rank 0 only",
               fields=(Output("clipped", kind="scalar", dtype="int64", doc="1 where the gradient was clipped"),
                       Output("max_update", (), doc="max |update|"))),
        InPlace("param", identical=True, doc="the parameters after the step, the same bits on every rank"),
        InPlace("exp_avg", doc="the first moment after the step"),
        InPlace("exp_avg_sq", doc="the second moment after the step"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=Sum("W", 1, "dtype", what="all-reduce of the gradients")
    + Relative(16, what="Adam's update: a dozen roundings, each relative to its value"),
    presets={"tiny": Preset({"N": 64}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"N": 1 << 20}, "float32", "4 MiB of fp32 parameters")},
    dtypes=("float32",),
)

