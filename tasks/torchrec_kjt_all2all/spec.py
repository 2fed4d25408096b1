"""torchrec_kjt_all2all: TorchRec's KeyedJaggedTensor all-to-all (PKB 70).

Model-parallel embedding tables (TorchRec's sharded EmbeddingBagCollection) live on different ranks, so
every rank's batch of sparse features (a KeyedJaggedTensor: per feature, a jagged list of ids per sample)
is redistributed by feature: rank d receives, from every rank, the bags of the features whose tables it
holds. The reference exchanges the split metadata (each peer's batch and value count: a host sync), moves
lengths and values by two all-to-all-v, and re-orders what arrived from source-major to feature-major
(TorchRec's recat). The output is a dict, its sizes data-dependent. Levers: no host sync (the bounds are
known), one exchange, the recat fused into the receive.
"""
from dataclasses import replace

import torch

from pkb_env.contract import (Clause, Comm, Cost, Custom, Exact, Group, Integers, Length, Output, PerRank, Preset,
                              Replicated, TaskSpec, Tensor)
from pkb_env.tasks._clauses import extreme_rows_edge


def _key_splits(gen, shape, dtype, env):
    """A random composition of the W * Fr features into W parts of at least one."""
    world, features = shape[0], shape[0] * int(env["Fr"])
    cuts = torch.randperm(features - 1, generator=gen, device=gen.device)[:world - 1] + 1
    bounds = torch.cat([cuts.new_zeros(1), torch.sort(cuts).values, cuts.new_full((1,), features)])
    return bounds.diff().to(dtype)


def _jagged_lengths(gen, shape, dtype, env):
    """Bag lengths summing to L per bag on average exactly: cut the values into shape[0] bags at uniform
    points (empty bags happen, as in real traffic)."""
    bags = shape[0]
    total = bags * int(env["L"])
    cuts = torch.sort(torch.randint(0, total + 1, (bags - 1,), generator=gen, device=gen.device)).values
    bounds = torch.cat([cuts.new_zeros(1), cuts, cuts.new_full((1,), total)])
    return bounds.diff().to(dtype)


def empty_first_bag(lengths, draw):
    """The first bag's ids moved to the second: an empty bag on every rank."""
    lengths = lengths.clone()
    lengths[1] += lengths[0]
    lengths[0] = 0
    return lengths


def one_feature_first(splits, draw):
    """Rank 0 owns one feature, the last rank the rest of rank 0's: uneven splits (W * Fr > W)."""
    splits = splits.clone()
    splits[-1] += splits[0] - 1
    splits[0] = 1
    return splits


def golden(inputs, world):
    """Rank d: for each of its features f, for each source rank s, the bags of s's feature f."""
    w = world.world_size
    splits = inputs[0]["key_splits"].tolist()
    starts = [sum(splits[:d]) for d in range(w)]
    batches = [a["lengths"].numel() // sum(splits) for a in inputs]
    tables = [a["lengths"].view(-1, b) for a, b in zip(inputs, batches)]
    bags = [list(a["values"].split(t.sum(dim=1).tolist())) for a, t in zip(inputs, tables)]
    out = []
    for d in range(w):
        features = range(starts[d], starts[d] + splits[d])
        out.append({"lengths": torch.cat([tables[s][f] for f in features for s in range(w)]),
                    "values": torch.cat([bags[s][f] for f in features for s in range(w)]),
                    "stride": torch.tensor(sum(batches)),
                    "stride_per_rank": torch.tensor(batches)})
    return out


def cost(c):
    """Per rank: its lengths and values to the owners of their features by all-to-all-v. The busiest rank
    moves at least the mean rank's off-rank share, (W-1)/W of its jagged tensor on average (counted at B's
    smallest); both read and written once."""
    jagged = c.nbytes("lengths") + c.nbytes("values")
    return Cost(comm=(Comm("all_to_allv", jagged * (c["W"] - 1) // c["W"]),), memory_bytes=2 * jagged)


SPEC = TaskSpec(
    name="torchrec_kjt_all2all",
    title="TorchRec KeyedJaggedTensor all-to-all (features to their tables' ranks)",
    description="key_splits (W,) int64, the same on every rank: rank d owns the next key_splits[d] of the F = "
                "W * Fr features (contiguous, rank 0's first). Every rank s holds a KJT of batch B_s (its own, "
                "per call): lengths (F * B_s,) int64 feature-major (feature f's bag lengths), values int64, "
                "every bag's ids in the same order. Every rank d returns a dict: 'lengths' and 'values' of its "
                "features over every rank's batch, ordered by feature, then source rank, then bag; 'stride' = "
                "sum of B_s (0-dim int64); 'stride_per_rank' = (B_0, ..., B_(W-1)) int64.",
    family="graph",
    parallelism="embedding model parallel: sparse features routed to the ranks holding their tables",
    pkb_id=70,
    origin="TorchRec KJTAllToAll (sharded EmbeddingBagCollection input distribution, with recat)",
    inputs=(
        Tensor("key_splits", ("W",), dtype="int64", layout=Replicated(),
               dist=Custom(_key_splits, "a random split of the W * Fr features into W parts of at least 1",
                           kinds=frozenset({"int"})),
               doc="how many features each rank owns, in rank order"),
        Tensor("lengths", ("W * Fr * B",), dtype="int64",
               dist=Custom(_jagged_lengths, "bag lengths cut at uniform points of W * Fr * B * L values "
                           "(L per bag on average, empty bags included)", kinds=frozenset({"int"})),
               doc="this rank's bag lengths, feature-major"),
        Tensor("values", ("W * Fr * B * L",), dtype="int64", dist=Integers(0, "V"),
               doc="every bag's ids, in the order of lengths"),
        Group("group", "world", doc="the ranks holding the tables"),
    ),
    lengths=(Length("B", "B0 - B0 / 4", "B0 + B0 / 4 + 1", doc="this rank's batch: B0 on average"),),
    outputs=(
        Output("lengths", max_shape=("(W * Fr - W + 1) * W * B",), dtype="int64", compare="exact",
               doc="bag lengths of this rank's features: by feature, then source rank, then bag"),
        Output("values", max_shape=("W * W * Fr * B * L",), dtype="int64", compare="exact",
               doc="the bags' ids, in the same order"),
        Output("stride", (), dtype="int64", compare="exact", doc="the total batch, sum of B_s"),
        Output("stride_per_rank", ("W",), dtype="int64", compare="exact", doc="each rank's batch"),
    ),
    returns="dict",
    golden=golden,
    cost=cost,
    tolerance_rule=Exact("ids and lengths are moved, never rounded"),
    edges=(replace(extreme_rows_edge("B", "B0 - B0 / 4", "B0 + B0 / 4"), name="kjt_corners",
                   text="the fewest bags on rank 0 and the most on the last, an empty first bag on every rank, one "
                        "feature on rank 0", also=(("lengths", empty_first_bag), ("key_splits", one_feature_first))),),
    clauses=(Clause("empty_bags", "bag lengths include empty bags", lambda t: any(bool((n == 0).any()) for n in
                                                                          t.each("lengths")),
                    "edge case kjt_corners (most plain draws too)", edge="kjt_corners"),
             Clause("ragged_batches", "every rank its own batch B_s: stride_per_rank differs by rank", lambda t: len(
                 {a["lengths"].numel() for a in t.inputs}) > 1, "edge case kjt_corners (the fewest on rank 0, the "
                 "most on the last rank)", edge="kjt_corners", applies=lambda x: x["W"] > 1, where="one rank"),
             Clause("uneven_keys", "key_splits uneven: ranks owning different numbers of features",
                    lambda t: len(set(t.inputs[0]["key_splits"].tolist())) > 1,
                    "edge case kjt_corners (most plain draws too)", edge="kjt_corners",
                    applies=lambda x: x["W"] > 1 and x["Fr"] > 1, where="one rank, or one feature a rank")),
    presets={
        "tiny": Preset({"Fr": 2, "B0": 4, "L": 3, "V": 1000}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"Fr": 2, "B0": 512, "L": 12, "V": 1000000}, "bfloat16",
                        "PKB's shapes: batch 512 per rank (384 to 640), about 2 features per rank (PKB: 15 at "
                        "W = 8), 12 ids per bag on average (PKB: 5 to 19)"),
        "large": Preset({"Fr": 8, "B0": 4096, "L": 16, "V": 100000000}, "bfloat16",
                        "a production batch: 8 features per rank, 4 MiB of ids per rank at W = 8"),
    },
    dtypes=("float32", "bfloat16"),
    departures=(
        "key_splits, each rank's batch, its bag lengths and ids are drawn per call from secret seeds (PKB's "
        "splits 1 + d % 3 and batch 512 are fixed and its inputs seeded with 42 + rank + trial, so a candidate "
        "can know its peers' metadata without exchanging it); bag lengths include empty bags",
        "every tensor is int64 and the task dtype (float32 or bfloat16) is unused: PKB's KJT has no weights",
        "the output order is stated (by feature, then source rank, then bag: TorchRec's recat) and compared "
        "exactly; key_splits is a replicated int64 tensor, the process group an input the judge builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Computed, Pkb  # noqa: E402  (kept apart from the task's own)


def _pkb_batch_size(call):
    """PKB passes this rank's batch size; this task's lengths hold W * Fr bags of it."""
    return call.values["lengths"].shape[0] // int(call.sizes["W"] * call.sizes["Fr"])


PKB = Pkb("torchrec_kjt_all2all",
          params=(Arg("lengths"), Arg("values"), Arg("key_splits", to="list"),
                  Computed("batch_size", _pkb_batch_size, "this rank's batch B"), Arg("pg", "group")))
