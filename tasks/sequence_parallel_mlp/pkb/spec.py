"""PKB 15 (combined_sharded_gemms) as PKB states it: x split by the hidden dim, every rank its own whole W1 and W2,
its rows of silu(x W1) W2 with its own weights, PKB's tolerance, in float32 (docs/pkb_compat.md).

PKB's harness gives every rank x_local (M, H/W), a block of columns (the hidden dim) of the activations, and its own
W1 (H, F) and W2 (F, H), drawn per rank. PKB's reference all-gathers x's hidden blocks into x (M, H), computes
silu(x W1) with its own W1, takes its rows [r M/W, (r + 1) M/W), multiplies by its own W2, and reduce-scatters a
buffer that is zero outside those rows, which returns them unchanged: rank r's result is its rows of
silu(x W1_r) W2_r. That is another function from the task's (a sequence-parallel MLP: x by tokens, W1 by columns, W2
by rows, the partial sums added), whose inputs cannot be made from PKB's (the task's `unmapped`), so no pkb-env
verdict stands beside this one.

Float32 only: with PKB's unit-normal weights silu(x W1) reaches ~16 and the outputs ~250, and in bfloat16 PKB's own
reference (silu(x W1) rounded before the second GEMM) is past PKB's tolerance in every call, 13 times the allowance
at tiny and 200 times at bench (measured in one process against float64, 20 and 4 calls at W = 2 and 4; float32 used
at most 0.024 of it).
"""
from dataclasses import replace

import torch

from pkb_env.contract import Arg, Comm, Compute, Cost, Normal, PerRank, Sharded, Tensor
from pkb_env.tasks._pkb import PKB_VARIANT, float32_presets, pkb_rule, pkb_tolerance
from pkb_env.tasks.sequence_parallel_mlp import spec as task


def golden(inputs, world):
    """silu(x W1_r) W2_r in float64 on the assembled x, rank r's own weights, its rows; rounded once."""
    x = world.assemble(inputs, "x").double()
    rows = x.shape[0] // world.world_size
    return [(torch.nn.functional.silu(x[r * rows:(r + 1) * rows] @ args["W1"].double()) @ args["W2"].double())
            .to(args["x"].dtype) for r, args in enumerate(inputs)]


def cost(c):
    """Per rank: its rows of every rank's hidden block (an all-to-all of x: PKB's degenerate reduce-scatter moves
    nothing that counts), two GEMMs on its M/W rows (4 M/W H F FLOPs); every input and output once in HBM."""
    m, h, f = c["M"], c["H"], c["F"]
    return Cost(comm=(Comm("all_to_all", m * h // c["W"] * c.elem),),
                compute=(Compute(4 * m // c["W"] * h * f, "matmul"),), memory_bytes=c.io_bytes())


SPEC = replace(
    task.SPEC, name="pkb_env.tasks.sequence_parallel_mlp.pkb",
    title="PKB 15 as PKB states it: combined sharded GEMMs (x by hidden blocks, per-rank weights)",
    description="Every rank holds x (M, H/W), its block of columns (the hidden dim) of the activations x (M, H), and "
                "its own W1 (H, F) and W2 (F, H). Rank r must return rows [r*M/W, (r+1)*M/W) of silu(x @ W1) @ W2, "
                "(M/W, H), with its own W1 and W2. Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) "
                "are correct.",
    inputs=(Tensor("x", ("M", "H"), layout=Sharded(1), doc="this rank's block of the hidden dim, every token"),
            Tensor("W1", ("H", "F"), dist=Normal(), layout=PerRank(), doc="this rank's own up-projection (PKB's)"),
            Tensor("W2", ("F", "H"), dist=Normal(), layout=PerRank(), doc="this rank's own down-projection")),
    outputs=tuple(pkb_tolerance(replace(o, doc="rows r of silu(x W1) W2 with this rank's weights"))
                  for o in task.SPEC.outputs),
    golden=golden, cost=cost, clauses=(),
    presets=float32_presets({name: p for name, p in task.SPEC.presets.items() if name != "large"}),
    dtypes=("float32",), tolerance_rule=pkb_rule(("float32",)),
    departures=(PKB_VARIANT,
                "PKB's function: x by hidden blocks, every rank's own whole W1 and W2, its rows of silu(x W1) W2 "
                "(the task: a sequence-parallel MLP, x by tokens, W1 by columns, W2 by rows)",
                "float32 only: in bfloat16 PKB's own reference is past PKB's tolerance (the module docstring)"),
    reference_path=None, pkb=None)
PKB = replace(task.PKB, params=(Arg("x_local", "x"), Arg("W1"), Arg("W2")), differs="", unmapped="", variant=None)
