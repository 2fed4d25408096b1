"""clip_grad_norm_no_ep: gradient clipping by the global norm under FSDP2 (PKB 21).

torchtitan's and VeOmni's clip_grad_norm_ for FSDP2: every rank holds a shard of each parameter's gradient,
so the norm that decides the clip is a sum of every rank's p-th powers (one all-reduce of a scalar), and
every rank then scales its own shards in place by the same coefficient. A scalar crosses ranks: latency
rules at PKB's size; the HBM passes (read every gradient for the norm, read and write them again to
scale) rule at `large`. The levers: one multi-tensor pass for the local sum, no host synchronisation
between the norm and the scaling (PKB's `if total_norm > max_norm` is one), and a scaling pass that skips
the write where nothing is clipped.

max_norm is drawn per call around the expected norm so that about half the calls clip and half leave the
gradients unchanged: with PKB's max_norm = 1.0 every call clips, and a candidate that always scales would
pass.
"""
import math

import torch

from pkb_env.contract import (Comm, Compute, Const, Cost, Custom, Group, InPlace, Output, Preset, Relative,
                              Replicated, Scalar, Sharded, TaskSpec, Tensor, Ulps)
from pkb_env.tasks._clauses import blocks, clip_clauses, clip_edges

GRADS = ("grad_0", "grad_1", "grad_2")
NORM_TYPE = 2.0


def _max_norm(gen, shape, dtype, env):
    """Uniform in [0.5, 1.5) times the expected global norm, sqrt(3 W M N) for unit-normal gradients."""
    expected = math.sqrt(3 * env["W"] * env["M"] * env["N"])
    return torch.empty(shape, dtype=torch.float64, device=gen.device).uniform_(0.5, 1.5, generator=gen).mul_(expected).to(dtype)


def golden(inputs, world):
    """The norm of the full gradients in float64; each full gradient scaled by min(1, max_norm / norm) in
    float64 and rounded once to its dtype, written back into every rank's shard."""
    first = inputs[0]
    p = first["norm_type"]
    full = {name: world.assemble(inputs, name) for name in GRADS}
    norm = sum(g.double().abs().pow(p).sum() for g in full.values()) ** (1.0 / p)
    coef = min(1.0, first["max_norm"] / float(norm))
    for name, g in full.items():
        world.update(inputs, name, (g.double() * coef).to(g.dtype))
    return world.distribute(norm.float(), "total_norm")


def cost(c):
    """Per rank: an all-reduce of one fp32 scalar; 3 FLOPs an element (square and add for the norm, the
    scaling); the three shards read once (a call that clips also writes them back; a call that does not
    need not, and the bound stays below both)."""
    elements = 3 * c["M"] * c["N"]
    return Cost(comm=(Comm("all_reduce", c.nbytes("total_norm")),),
                compute=(Compute(3 * elements, "vector"),),
                memory_bytes=sum(c.nbytes(name) for name in GRADS) + c.nbytes("total_norm"))


# The norm: a sum of n = 3 W M N squares in fp32. Its rounding errors grow like a random walk, u * S *
# sqrt(n / 3) for a sum taken in one sequential chain (the worst order), half that for the norm: an rtol
# of u32 * sqrt(n) admits any summation order, and rejects a norm that misses one rank's shards by far
# (a factor sqrt((W - 1) / W)).
NORM_RULE = Relative("sqrt(3 * W * M * N)", "float32", what="the fp32 sum of 3 W M N squares, in any order")

# The scaled gradients: coef carries the norm's relative error; the reference's and the golden's products,
# each rounded once, land one ulp (2u) apart wherever a product sits near a rounding midpoint and the
# coefficients differ by a hair (measured at bench: up to 0.48 of 4u alone, bf16, W = 8). Scaled by ~1/2000,
# fp16 gradients reach its subnormals, where such a flip is one absolute step (measured: 0.50 of two steps at
# W = 8): four subnormal steps of atol.
GRAD_RULE = (NORM_RULE + Relative(2, what="products of coefficients a hair apart rounding to neighbours")
             + Ulps(4, what="gradients scaled into the dtype's subnormals"))

SPEC = TaskSpec(
    name="clip_grad_norm_no_ep",
    title="Clip gradients by their global norm (FSDP2 clip_grad_norm_, no expert parallelism)",
    description="Every rank of fsdp_group holds its shard of three gradients, grad_0, grad_1 and grad_2 (M, N) "
                "each: block r of the rows of a full gradient (W*M, N). With p = norm_type = 2, total_norm = "
                "(sum over every element of every full gradient of |g|^p)^(1/p), accumulated in fp32. Every "
                "rank must multiply its three shards IN PLACE by coef = min(1, max_norm / total_norm), the "
                "products in the gradients' dtype, and return total_norm, a 0-dim fp32 tensor (the same on "
                "every rank).",
    family="fsdp",
    parallelism="FSDP2: gradients sharded by rows; the norm's p-th powers all-reduced over the shard group",
    pkb_id=21,
    origin="torchtitan / VeOmni clip_grad_norm_ for FSDP2 (DTensor gradients): local p-th power sums, an "
           "all-reduce over the FSDP group, one coefficient applied to every gradient",
    inputs=(
        *(Tensor(name, ("W * M", "N"), layout=Sharded(0), doc=f"this rank's rows of gradient {name[-1]}")
          for name in GRADS),
        Scalar("max_norm", Custom(_max_norm, "uniform in [0.5, 1.5) times sqrt(3 W M N), the expected norm: "
                                  "about half the calls clip", kinds=frozenset({"float"})),
               doc="the largest total norm left unscaled"),
        Const("norm_type", NORM_TYPE, doc="p of the p-norm"),
        Group("fsdp_group", "world", doc="the ranks the gradients are sharded over"),
    ),
    outputs=(
        Output("total_norm", (), dtype="float32", layout=Replicated(), tolerance=NORM_RULE,
               doc="the p-norm of the full gradients, before clipping"),
        *(InPlace(name, doc=f"this rank's shard of gradient {name[-1]} after clipping") for name in GRADS),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=GRAD_RULE,
    edges=clip_edges("max_norm"),
    clauses=clip_clauses(lambda t: float(sum(b.double().pow(2).sum() for g in GRADS for b in blocks(t, g)) ** 0.5)),
    presets={
        "tiny": Preset({"M": 8, "N": 16}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's size: three 1024 x 1024 shards a rank"),
        "large": Preset({"M": 4096, "N": 4096}, "bfloat16",
                        "96 MiB of bf16 gradients a rank, read for the norm and again to scale them (~40 us of "
                        "HBM on an H200): bandwidth-bound, beyond the all-reduce's latency"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to compute its peers' norms without communicating)",
        "the judge passes the FSDP group (every rank) and the norm is all-reduced over it: PKB passes None, "
        "which its helper skips, so each rank clipped by its own shard's norm and nothing crossed ranks",
        "max_norm is drawn per call around the expected norm, so that about half the calls leave the gradients "
        "unchanged (PKB's 1.0 clips in every call)",
        "the clip coefficient stays on the device, min(1, max_norm / total_norm): PKB's `if total_norm > "
        "max_norm` is a host synchronisation in the hot path",
        "the three gradients are three arguments (the contract has no list input); the scaled gradients are "
        "compared after the call (PKB checks only the returned norm)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Listed, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("clip_grad_norm_no_ep", params=(Listed("grad_tensors", ("grad_0", "grad_1", "grad_2")), Arg("max_norm"),
                                           Arg("norm_type"), Arg("fsdp_group")))
