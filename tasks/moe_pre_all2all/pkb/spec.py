"""PKB 28 (moe_pre_all2all) as PKB states it: every rank's K T permuted rows cut into PKB's equal splits, whatever its
routing, regrouped by PKB's per-expert counts; the routing map returned in float32, PKB's tolerance
(tasks/_pkb_dispatch.py; docs/pkb_compat.md).

Given the counts, PKB's function is the task's: permute the tokens expert-major, send input_splits[r] of the permuted
rows to rank r in turn, cut what arrives into chunks by num_global_tokens_per_local_expert read row-major (chunk
s E/W + l, of size [s, l]) and put them in the order local expert, then source. PKB's counts do not follow its mask,
so a row may land on a rank that does not hold its expert, and the chunks it is regrouped by are not experts' rows:
the golden follows the counts, as PKB's function does.
"""
from dataclasses import replace

import torch

from pkb_env.contract import Const, Cost, Custom, Group, Output, Ret, Tensor
from pkb_env.tasks._moe_dispatch import mapping, picks
from pkb_env.tasks._pkb import pkb_rule
from pkb_env.tasks._pkb_dispatch import COUNTS, DEPARTURES, EVEN, counts, exchange, offrank, one_hot_mask
from pkb_env.tasks.moe_pre_all2all import spec as task


def golden(inputs, world):
    """Per rank: the rows the counts bring it, regrouped by its per-expert counts; its mask summed over the picks;
    its expert-major permutation."""
    size = world.world_size
    local = world["E"] // size
    perms = [mapping(picks(args["expert_mask"])) for args in inputs]
    arrived = exchange([args["hidden_states"][p] for args, p in zip(inputs, perms)],
                       [args["input_splits"] for args in inputs])
    outs = []
    for args, rows, perm in zip(inputs, arrived, perms):
        chunks = rows.split(args["num_global_tokens_per_local_expert"].flatten().tolist())   # chunk s * local + l
        regrouped = torch.cat([chunks[s * local + l] for l in range(local) for s in range(size)])
        outs.append((regrouped, args["expert_mask"].sum(dim=1), perm))
    return outs


def cost(c):
    """One all-to-all-v of PKB's counts; HBM at least: every input read and every output written once."""
    return Cost(comm=(offrank(c),), memory_bytes=c.io_bytes())


SPEC = replace(
    task.SPEC, name="pkb_env.tasks.moe_pre_all2all.pkb",
    title="PKB 28 as PKB states it: MoE dispatch by PKB's equal splits",
    description="Every rank holds hidden_states (T, N) and expert_mask (E, K, T) float32, one-hot: "
                "expert_mask[e, k, t] = 1 where token t's k-th pick is expert e (each token K distinct experts of "
                "E, drawn uniformly on every rank). " + COUNTS + " Every rank must permute its tokens "
                "expert-major (for each expert, the tokens that picked it, in token order), send input_splits[r] of "
                "those rows to each rank r in turn (one all-to-all-v; output_splits[s] rows arrive from rank s), "
                "cut what arrives into chunks by num_global_tokens_per_local_expert read row-major (chunk "
                "s * E/W + l holds [s, l] rows), and return (the chunks in the order local expert l, then source s, "
                "(K T, N); the routing map expert_mask.sum(dim=1), (E, T) float32; the permutation's token indices "
                "(K T,) int64). Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) are correct; indices "
                "exactly.",
    routings=(),
    inputs=(Tensor("hidden_states", ("T", "N"), doc="this rank's tokens"),
            Tensor("expert_mask", ("E", "K", "T"), "float32",
                   Custom(one_hot_mask, "one-hot: each token's K distinct experts of E, drawn uniformly"),
                   doc="expert_mask[e, k, t] = 1 where token t's k-th pick is expert e"),
            Const("num_experts", dim="E", doc="E, the experts of the group"),
            *counts("expert_mask"),
            Group("group", "world", doc="the expert-parallel group")),
    outputs=(Output("permuted", ("K * T", "N"),
                    doc="the rows received, chunks by num_global_tokens_per_local_expert, local expert then source"),
             Output("routing_map", ("E", "T"), dtype="float32", doc="expert_mask.sum(dim=1)"),
             Output("permutation", ("K * T",), dtype="int64",
                    doc="the token of each of this rank's pairs, expert-major, token ascending")),
    golden=golden, cost=cost, tolerance_rule=pkb_rule(task.SPEC.dtypes), edges=(), clauses=(), world_sizes=EVEN,
    departures=DEPARTURES, reference_path=None, pkb=None)
PKB = replace(task.PKB, returns=(Ret("permuted"), Ret("routing_map"), Ret("permutation"),
                                 Ret(None, why="the tokens' torch.Size, which the caller knows")),
              differs="", variant=None)
