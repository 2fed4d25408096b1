"""PKB 67 (gnn_sparse_embedding_all2all) as PKB states it: every (index, row) pair goes to rank index % W, PKB's
owner rule, PKB's tolerance (docs/pkb_compat.md).

PKB's reference picks each pair's owner as idx % W and sorts the pairs by owner with a stable argsort, so each owner
receives, sender by sender in rank order, that sender's pairs in their original order: the task's order, with
another owner rule (the task's rank s owns the range [s P, (s + 1) P), P = ceil(V / W), which its edge case
range_ends and its clause ceil_partition test; neither means anything under PKB's rule, so both go). The indices are
drawn as PKB draws them, uniform in [0, V) (the task's distribution); V does not enter PKB's function beyond that,
and bench takes PKB's 100000.
"""
from dataclasses import replace

import torch

from pkb_env.tasks._pkb import PKB_VARIANT, pkb_rule, pkb_tolerance, plain_clauses
from pkb_env.tasks.gnn_sparse_embedding_all2all import spec as task


def golden(inputs, world):
    """Rank s receives, sender by sender in rank order, the pairs whose index i has i % W == s, each sender's in
    their original order."""
    w = world.world_size
    keep = [[a["idx"] % w == s for a in inputs] for s in range(w)]
    return [tuple(torch.cat([a[name][k] for a, k in zip(inputs, keep[s])]) for name in ("idx", "value"))
            for s in range(w)]


OWNER = "Rank s owns the indices [s P, (s + 1) P) with P = ceil(V / W)."
if OWNER not in task.SPEC.description:
    raise ValueError(f"gnn_sparse_embedding_all2all's variant restates {OWNER!r} of the task's description, which no "
                     f"longer says it")
SPEC = replace(
    task.SPEC, name="pkb_env.tasks.gnn_sparse_embedding_all2all.pkb",
    title=f"PKB 67 as PKB states it: {task.SPEC.title}",
    description=task.SPEC.description.replace(OWNER, "Rank s owns the indices i with i % W == s (PKB's owner rule).")
    + " Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) are correct; indices exactly.",
    outputs=tuple(pkb_tolerance(replace(o, compare="close", doc=o.doc.replace("the indices this rank owns",
                                                                           "the indices i % W == this rank")))
                  for o in task.SPEC.outputs),
    golden=golden, edges=(), clauses=plain_clauses(task.SPEC),
    presets={**task.SPEC.presets, "bench": replace(task.SPEC.presets["bench"],
                                                   dims={**task.SPEC.presets["bench"].dims, "V": 100000},
                                                   note="PKB's shapes: 1024 pairs of 128 per rank into a 100000-row "
                                                        "table; latency-bound")},
    tolerance_rule=pkb_rule(task.SPEC.dtypes),
    departures=(PKB_VARIANT, "PKB's owner rule: index i to rank i % W (the task's: range blocks of ceil(V / W) ids, "
                             "its edge case and clause on their ends gone)"),
    reference_path=None, pkb=None)
PKB = replace(task.PKB, differs="", variant=None)
