"""PKB 74 (fla_kimi_delta_attention_cp_tp) as PKB states it: every rank its own q, k, v, g, beta; each cp group's
blocks one sequence; every head of it; the tp ranks' outputs summed; PKB's gate parameters and tolerance
(docs/pkb_compat.md).

PKB's harness draws every rank's own q, k, v, g and beta (seeded by rank) and builds Megatron's tp-cp groups (tp
fastest; tp = 2 where W >= 4 is even, else 1): the ranks of a cp group, those sharing a tp index t, hold in cp order
the blocks of one sequence, sequence t. PKB's reference all-gathers its cp group's blocks, runs KDA over that whole
sequence, every head, token by token in float32, and all-reduces the result over the tp group (whose ranks hold the
other sequences' blocks), then keeps its cp block: rank (c, t) returns block c of the sum over t' of KDA(sequence t').
The task's tp ranks instead hold the same blocks and split the heads. PKB's gate parameters are linspaces in [-0.1,
0.1] (bfloat16, the same on every rank), so a_t = exp(-5 sigmoid(~g_t)): a log decay of about -2.5 a token (the
state keeps little beyond a few positions; the task draws fla's initialisation instead). KDA itself is the task's.
"""
from dataclasses import replace

import torch

from pkb_env.contract import Comm, Compute, Cost, Custom, Normal, PerRank
from pkb_env.tasks._pkb import PKB_VARIANT, pkb_rule, pkb_tolerance
from pkb_env.tasks.kimi_delta_attention_cp_tp import spec as task

MINE = ("q", "k", "v", "g", "beta")


def golden(inputs, world):
    """KDA of each tp index's sequence (its cp group's blocks in cp order) in float64, summed over the tp indices;
    rank (c, t) gets block c of the sum, rounded once."""
    ranks = range(world.world_size)
    sequences = [[r for r in ranks if world.coords(r)["tp"] == t] for t in range(world["tp"])]
    for members in sequences:
        members.sort(key=lambda r: world.coords(r)["cp"])
    shared = {name: inputs[0][name] for name in ("a_log", "dt_bias")}
    total = sum(task.kda({**shared, **{n: torch.cat([inputs[r][n] for r in members], dim=1) for n in MINE}})
                for members in sequences)
    block = inputs[0]["q"].shape[1]
    return [total[:, world.coords(r)["cp"] * block:(world.coords(r)["cp"] + 1) * block].to(inputs[r]["q"].dtype)
            for r in ranks]


def _linspace(gen, shape, dtype, env):
    """PKB's gate parameter: torch.linspace(-0.1, 0.1, n) in bfloat16, the same on every rank and call."""
    return torch.linspace(-0.1, 0.1, shape[0], dtype=torch.bfloat16, device=gen.device).to(dtype)


LINSPACE = Custom(_linspace, "PKB's linspace(-0.1, 0.1) in bfloat16, the same on every rank and call",
                  kinds=frozenset({"float"}))


def cost(c):
    """Per rank: its sequence's state entering its block (one (K, V) matrix per head, the task's KCP exchange, now
    for every head), the all-reduce of its block's outputs over tp, and the recurrence's ~6KV per token and head for
    every head of its block (the tp ranks hold other sequences, so nothing is split); every input and output once."""
    b, block, heads, kd, vd = c["B"], c["L"], c["H"], c["K"], c["V"]
    return Cost(comm=(Comm("sendrecv", b * heads * kd * vd * c.elem, "cp"),
                      Comm("all_reduce", b * block * heads * vd * c.elem, "tp")),
                compute=(Compute(6 * kd * vd * b * block * heads, "matmul"),), memory_bytes=c.io_bytes())


RULE = ", per batch and head: "
if RULE not in task.SPEC.description:
    raise ValueError(f"kimi_delta_attention_cp_tp's variant reuses the task's KDA after {RULE!r} in its description, "
                     f"which no longer says it")
SPEC = replace(
    task.SPEC, name="pkb_env.tasks.kimi_delta_attention_cp_tp.pkb",
    title=f"PKB 74 as PKB states it: {task.SPEC.title}",
    description="Every rank holds its own q, k, g (B, L, H, K), v (B, L, H, V) and beta (B, L, H), and PKB's gate "
                "parameters a_log (H,) and dt_bias (H*K,) (linspaces in [-0.1, 0.1], bfloat16). The ranks of a cp "
                "group (those sharing a tp coordinate t) hold, in cp order, the blocks of sequence t. Rank (cp c, "
                "tp t) must return block c (B, L, H, V) of the sum over every tp coordinate t' of KDA over sequence "
                "t'" + task.SPEC.description[task.SPEC.description.index(RULE):]
    + " Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) are correct.",
    inputs=tuple(replace(d, shape=("B", "L", *d.shape[2:]), dist=Normal(), layout=PerRank(),
                         doc=f"{d.doc}: this rank's own block (PKB draws every rank's)") if d.name in MINE
                 else replace(d, dtype="bfloat16", dist=LINSPACE) if d.name in ("a_log", "dt_bias") else d
                 for d in task.SPEC.inputs),
    outputs=tuple(pkb_tolerance(replace(o, doc="block c of the sum over tp of every sequence's KDA"))
                  for o in task.SPEC.outputs),
    golden=golden, cost=cost, clauses=(), tolerance_rule=pkb_rule(task.SPEC.dtypes),
    departures=(PKB_VARIANT,
                "every rank its own q, k, v, g, beta, as PKB draws them: a cp group's blocks are one sequence, and "
                "the tp all-reduce sums the outputs of the tp coordinates' sequences (the task: one sequence, the "
                "same blocks on tp peers, the heads split over tp)",
                "PKB's gate parameters, linspaces in [-0.1, 0.1] in bfloat16 (the task: fla's initialisation)"),
    reference_path=None, pkb=None)
PKB = replace(task.PKB, differs="", variant=None)
