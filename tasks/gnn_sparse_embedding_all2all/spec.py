"""gnn_sparse_embedding_all2all: route sparse embedding rows to the ranks that own their indices (PKB 67).

A distributed sparse embedding (DGL's DistEmbedding with a sparse optimizer) partitions the table by
index range; every rank holds the (index, row) pairs it touched and sends each to its owner. How many a
rank receives depends on every rank's indices, so the outputs have a data-dependent length, at most
W * T. The reference exchanges the counts, syncs the host to size the receive, then moves indices and
rows in two more all-to-alls. Levers: no host sync (the bound is known: receive into W * T slots and
compact on the device), one exchange for indices and rows, no sorted copies.
"""
import torch

from pkb_env.contract import (Clause, Comm, Const, Cost, Edge, Exact, Group, Integers, Output, PerRank, Preset,
                              TaskSpec, Tensor)


def range_ends(idx, draw):
    """Every rank's first two indices become the last index of one owner's range and the first of the next
    (s P - 1 and s P for an s drawn per call, P = ceil(V / W)): where W does not divide V, a floor(V / W)
    partition gives the first of them to the next rank, so the ceiling the statement names is tested in
    every step (with uniform indices, in about half the calls at tiny)."""
    world, size = int(draw.env["W"]), int(draw.env["V"])
    per_rank = -(-size // world)
    ranges = max(-(-size // per_rank) - 1, 1)     # owners whose range has a next one (at least one)
    s = 1 + int(torch.randint(ranges, (), generator=draw.gen, device=draw.gen.device))
    idx = idx.clone()
    idx[:2] = torch.tensor([min(s * per_rank, size) - 1, min(s * per_rank, size - 1)], dtype=idx.dtype,
                          device=idx.device)
    return idx


def floor_owner_differs(trial):
    """Some index whose owner under P = ceil(V / W) differs from floor(V / W)'s."""
    idx, world, size = trial.cat("idx"), trial.world_size, int(trial["V"])
    return bool((idx // -(-size // world) != idx // (size // world)).any())


def golden(inputs, world):
    """Rank s receives, sender by sender in rank order, the pairs whose index lies in [s P, (s + 1) P), each
    sender's in their original order."""
    w = world.world_size
    per_rank = -(-world["V"] // w)
    out = []
    for s in range(w):
        keep = [a["idx"] // per_rank == s for a in inputs]
        out.append((torch.cat([a["idx"][k] for a, k in zip(inputs, keep)]),
                    torch.cat([a["value"][k] for a, k in zip(inputs, keep)])))
    return out


def cost(c):
    """Per rank: an all-to-all-v of its pairs (an int64 index and a row each). The busiest rank sends or
    receives at least the mean, whose expectation under uniform indices is T (W-1)/W off-rank pairs
    (counted here; a draw fluctuates by about sqrt(T) around it). Memory: its pairs read, and at least as
    many written (the mean rank receives T)."""
    pair = 8 + c["D"] * c.elem
    offrank = c["T"] * (c["W"] - 1) // c["W"]
    return Cost(comm=(Comm("all_to_allv", offrank * pair),), memory_bytes=2 * c["T"] * pair)


SPEC = TaskSpec(
    name="gnn_sparse_embedding_all2all",
    title="Sparse embedding all-to-all: (index, row) pairs to their owners",
    description="Every rank holds idx (T,) int64 in [0, V) and value (T, D), a row per index, and num_embeddings "
                "= V. Rank s owns the indices [s P, (s + 1) P) with P = ceil(V / W). Every rank s returns "
                "(recv_idx, recv_value): every pair, from any rank, whose index it owns, grouped by sending rank "
                "in rank order and, within a sender, in that sender's original order; the count n differs by "
                "rank and by call.",
    family="graph",
    parallelism="graph parallel: sparse embedding rows routed to the owners of a range-partitioned table",
    pkb_id=67,
    origin="DGL DistEmbedding / sparse optimizer (sparse gradient rows exchanged by all-to-all to the owner "
           "of each index's partition)",
    inputs=(
        Tensor("idx", ("T",), dtype="int64", dist=Integers(0, "V"), layout=PerRank(),
               doc="the embedding rows this rank touched (repeats allowed)"),
        Tensor("value", ("T", "D"), layout=PerRank(), doc="a row per index (a sparse gradient)"),
        Const("num_embeddings", dim="V", doc="the table's size; rank s owns [s P, (s + 1) P), P = ceil(V / W)"),
        Group("group", "world", doc="the ranks sharing the table"),
    ),
    outputs=(
        Output("recv_idx", max_shape=("W * T",), dtype="int64", layout=PerRank(), compare="exact",
               doc="the indices this rank owns, from rank 0's first, each sender's in its original order"),
        Output("recv_value", max_shape=("W * T", "D"), layout=PerRank(), compare="exact",
               doc="their rows, in the same order"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=Exact("pure data movement: every pair must arrive bit-exact and in the stated order"),
    presets={
        "tiny": Preset({"T": 6, "D": 4, "V": 43}, "float32", "CPU ranks, milliseconds (V prime: no W divides it)"),
        "bench": Preset({"T": 1024, "D": 128, "V": 100003}, "bfloat16",
                        "PKB's shapes: 1024 pairs of 128 per rank into a 100003-row table (PKB: 100000); "
                        "latency-bound"),
        "large": Preset({"T": 65536, "D": 128, "V": 10000019}, "bfloat16",
                        "a large mini-batch's sparse gradients: 16 MiB per rank, bandwidth-bound on NVLink"),
    },
    edges=(Edge("range_ends", "idx", range_ends, "indices at the ends of two owners' ranges", everywhere=True),),
    clauses=(Clause("ceil_partition", "rank s owns [s P, (s + 1) P) with P = ceil(V / W), W not dividing V: "
                    "an index a floor(V / W) partition gives to another rank", floor_owner_differs,
                    "the presets' V is prime (43, 100003, 10000019), so no W in 2-8 divides it; edge case "
                    "range_ends puts P - 1-style indices in every rank's idx", edge="range_ends",
                    applies=lambda x: x["V"] % x["W"] != 0, where="W divides V"),),
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to know its peers' indices and skip the count exchange)",
        "the order of the received pairs is stated (by sender, then the sender's order) and compared exactly; "
        "the owner of an index is its range block of P = ceil(V / W) rows, for any W",
        "the table's size V is a prime (43, 100003 and 10000019 rows, PKB: 100000 at bench), so that no world "
        "size divides it and ceil(V / W) is not floor(V / W): at PKB's 100000 and W = 2, 4, 8 a floor "
        "partition owns the same indices and passes; an edge case puts indices at the ends of the owners' "
        "ranges in every step",
        "the process group is an input the judge builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("gnn_sparse_embedding_all2all", params=(Arg("idx"), Arg("value"), Arg("num_nodes", "num_embeddings"),
                                                   Arg("group")),
          differs="pkb-env's rank s owns the indices [s P, (s + 1) P), P = ceil(V / W); PKB's reference sends index "
                  "i to rank i % W (the order, by sender, then the sender's, is the same)", variant="pkb")
