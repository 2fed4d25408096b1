"""PKB 39 (ulysses_attention_e2e) as PKB states it: PKB's inputs (every rank its own weights, standard normal) and
PKB's local attention, over the heads of each position, PKB's tolerance, in float32 (docs/pkb_compat.md).

PKB's reference all-to-alls q, k, v from sequence- to head-sharded, (B, S, H/W, E) on each rank, and hands that to
its local attention as it is, so the scores are (H/W, H/W) per position: each position attends over the H/W heads of
the block of heads the exchange gave rank j, never over the sequence (the task's attention, per head over all S
positions). The second all-to-all brings every position back to its rank, which projects it with w_o. So every
output position is a function of that position's own projections only: the result needs no exchange at all, and
the variant's reference makes none (its cost model says so). PKB draws every rank's own w_qkv and w_o (seeded by
rank), unit normal, and the result is each rank's positions projected with its own weights.

With unit-normal weights the scores q . k / sqrt(E) have an RMS of about D (32 at tiny, 512 at PKB's D = 512),
so the softmax is nearly a hard choice, and where two heads' scores nearly tie, their rounding moves the outputs.
Measured in one process (PKB's function computed in the dtype against float64, PKB's rule):
- bfloat16 at tiny's D, H, E: 751 to 1089 of 2560 outputs past PKB's tolerance in 5 calls (W = 2, 4): float32 only;
- float32 at PKB's sizes (B 16, S 16, D 512, 8 heads of 64): past it in 102 of 200 calls at W = 2 and 41 of 200 at
  W = 4 (up to 5.6 times the allowance), so PKB's own reference would be judged wrong there by its own tolerance;
  at D = 64 (8 heads of 8) the worst of 200 calls used 0.09 of it (W = 2, 4, 8), at tiny 0.015. So bench is PKB's
  B, S and 8 heads with D = 64, and the task's `large` (D = 2048) is not stated;
- bfloat16 at bench (D = 64): 1970 to 2322 of a rank's 8192 outputs past PKB's tolerance at W = 2, 590 to 872 of
  4096 at W = 4 (every rank of 3 calls each, up to 440 times the allowance). This is rounding in a nearly hard
  softmax, not ties a draw could avoid, so the variant stays float32 although PKB's corpus runs in bfloat16 (a file
  asserting bfloat16, as GPT-5.5's 40 does, is refused for its dtype, and the feedback says it was judged in
  float32).
"""
from dataclasses import replace

import torch

from pkb_env.contract import Compute, Cost, Normal, PerRank, Preset, WorldSizes
from pkb_env.tasks._pkb import PKB_VARIANT, pkb_rule, pkb_tolerance
from pkb_env.tasks.ulysses_attention import spec as task


def golden(inputs, world):
    """Each rank's positions, in float64: per position, attention of every head over the H/W heads of its group,
    projected with that rank's w_o; rounded once."""
    w = world.world_size
    outs = []
    for args in inputs:
        h = args["h"].double()
        batch, seq, _ = h.shape
        qkv = (h @ args["w_qkv"].double().t()).view(batch, seq, 3, w, args["num_heads"] // w, -1)
        q, k, v = qkv.unbind(2)
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        out = (torch.softmax(scores, dim=-1) @ v).reshape(batch, seq, -1) @ args["w_o"].double().t()
        outs.append(out.to(args["h"].dtype))
    return outs


def cost(c):
    """Per rank: its positions' projections (q, k, v and the output) and the attention of each head over the H/W
    heads of its group, no exchange (PKB's function is per position); every input and output once in HBM."""
    b, block, d, heads, e = c["B"], c["S"] // c["W"], c["D"], c["H"], c["E"]
    return Cost(comm=(), compute=(Compute(2 * b * block * d * 4 * heads * e, "matmul"),
                                  Compute(4 * b * block * heads * heads // c["W"] * e, "matmul")),
                memory_bytes=c.io_bytes())


OWN = {"w_qkv": "this rank's QKV projection (each rank its own, as PKB draws it), rows [q; k; v], head-major",
       "w_o": "this rank's output projection (each rank its own)"}
SPEC = replace(
    task.SPEC, name="pkb_env.tasks.ulysses_attention.pkb",
    title=f"PKB 39 as PKB states it: {task.SPEC.title}",
    description="A sequence split into W contiguous blocks: every rank holds h (B, S/W, D) and its own weights "
                "w_qkv (3 H E, D) and w_o (D, H E). For each of its positions, q, k, v = h w_qkv^T split into H "
                "heads of E; the heads form W groups of H/W consecutive heads; every head attends over the heads of "
                "its group at that position, softmax(q_i . k_j / sqrt(E)) over the group's heads j, weighting their "
                "v_j; the H results are concatenated and projected by this rank's w_o. Every rank returns its "
                "block (B, S/W, D). Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) are correct.",
    inputs=tuple(replace(d, dist=Normal(), layout=PerRank(), doc=OWN[d.name]) if d.name in OWN else d
                 for d in task.SPEC.inputs),
    outputs=tuple(pkb_tolerance(o) for o in task.SPEC.outputs),
    golden=golden, cost=cost, clauses=(),
    presets={"tiny": replace(task.SPEC.presets["tiny"], dtype="float32"),
             "bench": Preset({"B": 16, "S": 16, "D": 64, "H": 8, "E": 8}, "float32",
                             "PKB's B, S and 8 heads, D = 64 (at PKB's D = 512 float32 rounding alone is past PKB's "
                             "tolerance in a quarter to a half of the calls: the module docstring)")},
    dtypes=("float32",), tolerance_rule=pkb_rule(("float32",)),
    world_sizes=WorldSizes(splits=("H",), reason="PKB's exchange gives every rank H/W heads"),
    departures=(PKB_VARIANT,
                "PKB's local attention: over the H/W heads of each position's group (PKB's reference attends over "
                "the head dim of (B, S, H/W, E)), the task's over the sequence",
                "every rank its own unit-normal w_qkv and w_o, as PKB draws them (the task: one layer's weights of "
                "std 0.02 on every rank)",
                "float32 only, and bench at D = 64: PKB's unit-normal weights make the softmax nearly hard, and "
                "rounding near a tie moves the outputs past PKB's tolerance in bfloat16, and in float32 at PKB's "
                "D = 512 (the module docstring)"),
    reference_path=None, pkb=None)
PKB = replace(task.PKB, differs="", variant=None)
