"""PKB 29 (moe_post_all2all) as PKB states it: every rank holds K T expert-output rows and PKB's equal splits, whatever
its routing; the rows go back by those splits and are weighed and added by the routing; PKB's tolerance
(tasks/_pkb_dispatch.py; docs/pkb_compat.md).

Given the counts, PKB's function is the task's: cut expert_outputs into chunks by num_global_tokens_per_local_expert
read column-major (chunk l W + s, of size [s, l]), put them in the order source, then local expert, send
output_splits[s] of those rows to rank s in turn, and add row i of what arrives into token
local_input_permutation_mapping[i], weighted by the weight of routing_map's i-th pair in expert-major order. PKB's
counts do not follow the routing, so the rows a rank gets back are not its own tokens' expert outputs: the golden
follows the counts, as PKB's function does. Every rank holds and receives K T rows, the same number on every rank
(what a file that sizes a symmetric-memory buffer by its own rows relies on; the task's real counts differ by rank).

In bfloat16 PKB's reference (each product rounded, then added, in the dtype; the task's reference rounds as it does)
used at most 0.73 of PKB's tolerance in 20 bench-sized calls (in one process, against float64): two products'
half-ulps in [2, 4) bound it near 0.78; passing it takes two cancelling weighted picks of 4 and 3.8 or more, so
an output past 7.8 standard deviations (the weights add up to 1).
"""
from dataclasses import replace

import torch

from pkb_env.contract import Arg, Compute, Const, Cost, Custom, FromInputs, Group, Output, Tensor
from pkb_env.tasks._moe_dispatch import mapping
from pkb_env.tasks._pkb import pkb_rule
from pkb_env.tasks._pkb_dispatch import COUNTS, DEPARTURES, EVEN, counts, exchange, offrank, routing_map
from pkb_env.tasks.moe_post_all2all import spec as task


def _selected(values, shape, dtype, env):
    return values["routing_map"].T.nonzero()[:, 1].view(shape).to(dtype)   # row-major: each token's, ascending


def _permutation(values, shape, dtype, env):
    return mapping(values["routing_map"].T).to(dtype)


def _weights(gen, shape, dtype, env):
    return torch.randn(shape, generator=gen, device=gen.device).to(dtype).softmax(dim=-1)


def golden(inputs, world):
    """Per rank, in float64: the rows the counts bring back, each weighed by its pair's weight and added into its
    token, rounded once."""
    size = world.world_size
    local = world["E"] // size
    by_source = []
    for args in inputs:
        chunks = args["expert_outputs"].split(args["num_global_tokens_per_local_expert"].T.flatten().tolist())
        by_source.append(torch.cat([chunks[l * size + s] for s in range(size) for l in range(local)]))
    back = exchange(by_source, [args["output_splits"] for args in inputs])
    outs = []
    for args, rows in zip(inputs, back):
        weight = torch.zeros(args["routing_map"].T.shape, dtype=torch.float64).scatter(
            1, args["selected_experts"], args["routing_weights"].double())
        pair_weight = weight.T[args["routing_map"]]                           # expert-major, token ascending
        out = torch.zeros((args["routing_map"].shape[1], rows.shape[1]), dtype=torch.float64)
        out.index_add_(0, args["local_input_permutation_mapping"], rows.double() * pair_weight[:, None])
        outs.append(out.to(rows.dtype))
    return outs


def cost(c):
    """One all-to-all-v of PKB's counts; a multiply-add per element of every pair; HBM at least: every input read
    and the output written once."""
    return Cost(comm=(offrank(c),), compute=(Compute(2 * c["K"] * c["T"] * c["N"], "vector"),),
                memory_bytes=c.io_bytes())


SPEC = replace(
    task.SPEC, name="pkb_env.tasks.moe_post_all2all.pkb",
    title="PKB 29 as PKB states it: MoE combine by PKB's equal splits",
    description="Every rank holds routing_map (E, T) bool (each token's K distinct experts of E, drawn uniformly on "
                "every rank), selected_experts (T, K) int64 (each token's experts, ascending), routing_weights "
                "(T, K) (the softmax of K standard normals), local_input_permutation_mapping (K T,) int64 (the token "
                "of each pair, expert-major, token ascending) and expert_outputs (K T, N). " + COUNTS
                + " Every rank must cut expert_outputs into chunks by num_global_tokens_per_local_expert read "
                "column-major (chunk l * W + s holds [s, l] rows), put them in the order source s, then local "
                "expert l, send output_splits[s] of those rows to each rank s in turn (one all-to-all-v; "
                "input_splits[s] rows arrive from rank s), and return (T, N): row i of what arrives, times the "
                "weight of routing_map's i-th pair in expert-major order (routing_weights[t, k] where "
                "selected_experts[t, k] = e for the pair (e, t)), added into token "
                "local_input_permutation_mapping[i]. Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) "
                "are correct.",
    routings=(),
    inputs=(Tensor("expert_outputs", ("K * T", "N"), doc="this rank's K T rows of expert outputs"),
            Tensor("routing_weights", ("T", "K"), dist=Custom(_weights, "the softmax of K standard normals per token"),
                   doc="each pick's weight"),
            Tensor("selected_experts", ("T", "K"), "int64",
                   FromInputs(_selected, ("routing_map",), "each token's experts, ascending"),
                   doc="each token's K experts"),
            Const("num_experts", dim="E", doc="E, the experts of the group"),
            *counts("routing_map"),
            Tensor("routing_map", ("E", "T"), "bool",
                   Custom(routing_map, "each token's K distinct experts of E, drawn uniformly"),
                   doc="routing_map[e, t]: token t picked expert e"),
            Tensor("local_input_permutation_mapping", ("K * T",), "int64",
                   FromInputs(_permutation, ("routing_map",), "the token of each pair, expert-major, token "
                                                              "ascending"),
                   doc="the token of each of this rank's pairs, expert-major, token ascending"),
            Group("group", "world", doc="the expert-parallel group")),
    golden=golden, cost=cost, tolerance_rule=pkb_rule(task.SPEC.dtypes), edges=(), clauses=(), world_sizes=EVEN,
    departures=DEPARTURES, reference_path=None, pkb=None)
PKB = replace(task.PKB, params=(Arg("expert_outputs"), *task.PKB.params[1:]), differs="", variant=None)
