"""clip_grad_norm_ep: gradient clipping by the global norm under FSDP2 with expert parallelism (PKB 22).

VeOmni's EP-aware clip_grad_norm_: the ranks form an (ep, ep_fsdp) mesh; dense parameters are sharded
over every rank (the FSDP group), experts are split over the expert-parallel group and each expert's rows
over its EP-FSDP group. The expert gradients are first divided by the EP size; the norm's p-th powers are
then summed over the FSDP group for the dense part and over the EP-FSDP group, then the EP group, for the
experts, and one coefficient scales both. Three scalar all-reduces over three groups (the judge builds the
groups from the mesh before any call); the levers: one reduction for both parts (the two expert reductions
cover every rank once, as the dense one does), one multi-tensor pass, and no host synchronisation.

max_norm is drawn per call around the expected norm so that about half the calls clip (PKB's 1.0 clips in
every call).
"""
import math

import torch

from pkb_env.contract import (Clause, Comm, Compute, Const, Cost, Custom, Group, InPlace, Mesh, Output, Preset,
                              Relative, Replicated, Scalar, Sharded, TaskSpec, Tensor, Ulps)
from pkb_env.tasks._clauses import clip_clauses, clip_edges

GRADS = ("non_ep_grad", "ep_grad")
NORM_TYPE = 2.0


def _max_norm(gen, shape, dtype, env):
    """Uniform in [0.5, 1.5) times the expected norm, sqrt(W M N (1 + 1 / ep^2)) for unit-normal gradients
    (the expert part divided by ep)."""
    expected = math.sqrt(env["W"] * env["M"] * env["N"] * (1 + 1 / env["ep"] ** 2))
    return torch.empty(shape, dtype=torch.float64, device=gen.device).uniform_(0.5, 1.5, generator=gen).mul_(expected).to(dtype)


def total_norm(trial) -> float:
    """The statement's total norm of a trial's inputs, in float64 (the clauses' predicates)."""
    dense = trial.world.assemble(trial.inputs, "non_ep_grad").double()
    experts = trial.world.assemble(trial.inputs, "ep_grad").double() / max(trial.inputs[0]["ep_size"], 1)
    return float((dense.pow(2).sum() + experts.pow(2).sum()) ** 0.5)


def golden(inputs, world):
    """The norm of the full dense gradient and of the full expert gradient divided by ep_size, in float64;
    both scaled by min(1, max_norm / norm) in float64 and rounded once to their dtype, written back into every
    rank's shard."""
    first = inputs[0]
    p = first["norm_type"]
    dense = world.assemble(inputs, "non_ep_grad")
    dtype = dense.dtype
    experts = world.assemble(inputs, "ep_grad").double() / max(first["ep_size"], 1)
    norm = (dense.double().abs().pow(p).sum() + experts.abs().pow(p).sum()) ** (1.0 / p)
    coef = min(1.0, first["max_norm"] / float(norm))
    world.update(inputs, "non_ep_grad", (dense.double() * coef).to(dtype))
    world.update(inputs, "ep_grad", (experts * coef).to(dtype))
    return world.distribute(norm.float(), "total_norm")


def cost(c):
    """Per rank: one all-reduce of the two fp32 partial sums over every rank (the dense sum over the FSDP
    group, which is every rank, and the expert sum over ep_fsdp then ep, which together cover every rank
    once); 4 FLOPs an element (the division, square and add, the scaling); both shards read once (a call
    that clips also writes them: not counted, so the bound stays below every call)."""
    elements = 2 * c["M"] * c["N"]
    return Cost(comm=(Comm("all_reduce", 2 * c.nbytes("total_norm"), ("ep", "ep_fsdp")),),
                compute=(Compute(4 * elements, "vector"),),
                memory_bytes=sum(c.nbytes(name) for name in GRADS) + c.nbytes("total_norm"))


# As in clip_grad_norm_no_ep: an fp32 sum of n = 2 W M N squares in any order (a random walk of roundings,
# u S sqrt(n / 3) in one sequential chain, half that for the norm); the scaled gradients inherit it through
# coef. The division by ep_size (a power of two at every world size the mesh takes with F = 2 up to 8) is exact.
NORM_RULE = Relative("sqrt(2 * W * M * N)", "float32", what="the fp32 sum of 2 W M N squares, in any order")

# The scaled gradients: coef carries the norm's relative error; the reference's and the golden's products,
# each rounded once, land one ulp (2u) apart wherever a product sits near a rounding midpoint and the
# coefficients differ by a hair (measured at bench: up to 0.48 of 4u alone, bf16, W = 8). Scaled by ~1/2000,
# fp16 gradients reach its subnormals, where such a flip is one absolute step (measured: 0.50 of two steps at
# W = 8): four subnormal steps of atol.
GRAD_RULE = (NORM_RULE + Relative(2, what="products of coefficients a hair apart rounding to neighbours")
             + Ulps(4, what="gradients scaled into the dtype's subnormals"))

SPEC = TaskSpec(
    name="clip_grad_norm_ep",
    title="Clip gradients by their global norm with expert parallelism (FSDP2 + EP clip_grad_norm_)",
    description="The ranks form an (ep, ep_fsdp) mesh, ep_fsdp = F = 2 ranks sharing an expert. Every rank holds "
                "non_ep_grad (M, N), block r (rank order) of the rows of a dense gradient (W*M, N) sharded over "
                "fsdp_group (every rank), and ep_grad (M, N), its block of the expert gradient (W*M, N): experts "
                "split over ep_group, each expert's rows over ep_fsdp_group. First, where ep_size > 1, ep_grad is "
                "divided by ep_size. With p = norm_type = 2, total_norm = (sum of |g|^p over the full dense "
                "gradient and the full divided expert gradient)^(1/p), accumulated in fp32. Every rank must update "
                "both shards IN PLACE to (ep_grad divided by ep_size where ep_size > 1) times coef = min(1, "
                "max_norm / total_norm), the products in the gradients' dtype, and return total_norm, a 0-dim fp32 "
                "tensor (the same on every rank).",
    family="fsdp",
    parallelism="FSDP2 x expert parallel: dense gradients sharded over every rank, expert gradients over "
                "(ep, ep_fsdp); p-th power sums all-reduced over the FSDP, EP-FSDP and EP groups",
    pkb_id=22,
    origin="VeOmni EP-aware clip_grad_norm_ for FSDP2 (non-EP sums over the FSDP group, EP sums over the "
           "EP-FSDP then the EP group, one coefficient for both)",
    mesh=Mesh(("ep", "W / ep_fsdp"), ("ep_fsdp", "min(F, W)")),
    inputs=(
        Tensor("non_ep_grad", ("W * M", "N"), layout=Sharded(0), doc="this rank's rows of the dense gradient"),
        Tensor("ep_grad", ("W * M", "N"), layout=Sharded(0),
               doc="this rank's rows of the expert gradient (its experts, its EP-FSDP block)"),
        Scalar("max_norm", Custom(_max_norm, "uniform in [0.5, 1.5) times sqrt(W M N (1 + 1 / ep^2)), the "
                                  "expected norm: about half the calls clip", kinds=frozenset({"float"})),
               doc="the largest total norm left unscaled"),
        Const("norm_type", NORM_TYPE, doc="p of the p-norm"),
        Const("ep_size", dim="ep", doc="ranks in the expert-parallel group"),
        Group("fsdp_group", ("ep", "ep_fsdp"), doc="every rank: the dense gradient's shard group"),
        Group("ep_fsdp_group", "ep_fsdp", doc="the ranks sharing this rank's experts (each holds a block of rows)"),
        Group("ep_group", "ep", doc="the ranks holding the other experts, same EP-FSDP position"),
    ),
    outputs=(
        Output("total_norm", (), dtype="float32", layout=Replicated(), tolerance=NORM_RULE,
               doc="the p-norm of both gradients (the expert one divided by ep_size), before clipping"),
        InPlace("non_ep_grad", doc="this rank's shard of the dense gradient after clipping"),
        InPlace("ep_grad", doc="this rank's shard of the expert gradient, divided by ep_size and clipped"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=GRAD_RULE,
    edges=clip_edges("max_norm"),
    clauses=(Clause("divided", "ep_grad divided by ep_size where ep_size > 1", lambda t: t.inputs[0]["ep_size"] > 1,
                    "the mesh: ep = W / 2 > 1 from W = 4 on", applies=lambda x: x["ep"] > 1,
                    where="ep = 1: nothing divided"),
             *clip_clauses(total_norm)),
    presets={
        "tiny": Preset({"M": 8, "N": 16, "F": 2}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024, "F": 2}, "bfloat16",
                        "PKB's size: a 1024 x 1024 dense and expert shard a rank, ep = W / 2"),
        "large": Preset({"M": 8192, "N": 4096, "F": 2}, "bfloat16",
                        "128 MiB of bf16 gradients a rank, read for the norm and again to scale them (~55 us of "
                        "HBM on an H200): bandwidth-bound, beyond the all-reduces' latency"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to compute its peers' norms without communicating)",
        "the judge builds the three groups from the (ep, ep_fsdp) mesh before any call and passes them: PKB "
        "passes None for all three, which its helper skips, so nothing crossed ranks and each rank clipped by "
        "its own shards' norm",
        "max_norm is drawn per call around the expected norm, so that about half the calls leave the gradients "
        "unscaled (PKB's 1.0 clips in every call)",
        "the clip coefficient stays on the device, min(1, max_norm / total_norm): PKB's `if total_norm > "
        "max_norm` is a host synchronisation in the hot path",
        "one tensor for each of PKB's one-element lists (the contract has no list input); the updated "
        "gradients, ep_grad's division by ep_size included, are compared after the call (PKB checks only the "
        "returned norm)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Listed, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("clip_grad_norm_ep", params=(Listed("non_ep_grad_tensors", ("non_ep_grad",)),
                                        Listed("ep_grad_tensors", ("ep_grad",)), Arg("max_norm"), Arg("norm_type"),
                                        Arg("ep_size"), Arg("fsdp_group"), Arg("ep_fsdp_group"), Arg("ep_group")))
