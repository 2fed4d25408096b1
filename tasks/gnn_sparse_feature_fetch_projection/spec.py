"""gnn_sparse_feature_fetch_projection: fetch the features of a mini-batch's nodes from the ranks that
own them and project them (PKB 68).

A GNN's input layer over a feature table too large for one GPU (ogbn-papers100M: 111M nodes x 256):
every rank owns a contiguous block of the table, asks the owners for the rows of its mini-batch's nodes
(an all-to-all of ids, then one of rows) and multiplies them by the input projection. PKB's size needs
7-28 GB of features per rank; the presets here are scaled to what a GPU holds at `bench` (1M nodes per
rank, 512 MiB in bf16) and a CPU rank at `tiny`. Levers: no host syncs (the bound is known), owners
projecting before sending (the same bytes at P = D, fewer where P < D), the fetch overlapped with the GEMM.
"""
import torch

from pkb_env.contract import (Comm, Compute, Cost, Group, Integers, Normal, Output, Preset, Replicated, Rounded,
                              Sharded, Sum, TaskSpec, Tensor)
from pkb_env.tasks._clauses import remote, repeat_edge, repeated


def golden(inputs, world):
    """The global table's rows by id, times proj, in float64, rounded once."""
    table = world.assemble(inputs, "shard").double()
    proj = world.assemble(inputs, "proj").double()
    return [(table[a["node_ids"]] @ proj).to(a["shard"].dtype) for a in inputs]


def cost(c):
    """Per rank: its requested rows from other ranks, (W-1)/W of T on average for uniform ids (its ids go
    the same way, 8 bytes each); the T x D x P projection on tensor cores; the rows read (only the
    requested rows of the shard), proj read and the output written."""
    rows = c["T"] * (c["W"] - 1) // c["W"]
    return Cost(comm=(Comm("all_to_allv", rows * (c["D"] * c.elem + 8)),),
                compute=(Compute(2 * c["T"] * c["D"] * c["P"], "matmul"),),
                memory_bytes=c["T"] * c["D"] * c.elem + c.nbytes("proj") + c.nbytes("node_ids") + c.nbytes("out"))


SPEC = TaskSpec(
    name="gnn_sparse_feature_fetch_projection",
    title="GNN sparse feature fetch + projection",
    description="Every rank r holds shard (N, D), rows [r N, (r + 1) N) of a (W N, D) node-feature table, "
                "node_ids (T,) int64 in [0, W N) (its mini-batch's nodes, repeats allowed) and proj (D, P), the "
                "same on every rank. Every rank returns table[node_ids] @ proj, (T, P), in the order of node_ids.",
    family="graph",
    parallelism="graph parallel: a row-partitioned feature table, rows fetched from their owners",
    pkb_id=68,
    origin="DGL / GraphLearn distributed feature store (ogbn-papers100M-sized tables): fetch by all-to-all, "
           "then the input projection",
    inputs=(
        Tensor("shard", ("W * N", "D"), layout=Sharded(0), doc="this rank's block of the feature table"),
        Tensor("node_ids", ("T",), dtype="int64", dist=Integers(0, "W * N"),
               doc="the nodes this rank needs, owned anywhere"),
        Tensor("proj", ("D", "P"), dist=Normal(std=0.0625), layout=Replicated(), doc="the input projection"),
        Group("group", "world", doc="the ranks holding the table"),
    ),
    outputs=(Output("out", ("T", "P"), doc="the projected features of node_ids, row for row"),),
    golden=golden,
    cost=cost,
    tolerance_rule=(Sum("D", 0.125, "float32", what="the projection's fp32 accumulation, at twice the products' "
                                                     "RMS: the float32 reference reached 0.39 of the rule with the "
                                                     "RMS itself at tiny")
                    + Rounded(1, "0.0625 * sqrt(D)", what="the output rounded once")),
    edges=(repeat_edge("node_ids"),),
    clauses=(repeated("node_ids", "each returns its row"),
             remote("node_ids", lambda t, ids: ids // int(t["N"]), "rows come from the owner's shard")),
    presets={
        "tiny": Preset({"N": 16, "D": 16, "P": 8, "T": 12}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"N": 1048576, "D": 256, "P": 256, "T": 20000}, "bfloat16",
                        "PKB's batch (20000 ids, D = P = 256) over a table scaled to what one GPU holds: 1M nodes "
                        "per rank (512 MiB in bf16; PKB's 111M nodes need 7-28 GB per rank)"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "the table is scaled down: 1M nodes per rank at bench (PKB's 111M-node table needs 28.4, 14.2 and "
        "7.1 GB per rank at W = 2, 4, 8), so that a GPU holds it beside the reference's buffers",
        "node_ids are random per rank and call from secret seeds, repeats allowed (PKB's ids follow a fixed "
        "pattern, so a candidate can precompute where they live)",
        "the owner of a node is its contiguous block of N rows; the process group is an input the judge builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Harness, Pkb, Sizes  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("gnn_sparse_feature_fetch_projection",
          params=(Arg("local_embedding_shard", "shard"), Arg("input_node_ids", "node_ids"), Arg("proj_matrix", "proj"),
                  Harness("num_total_nodes", Sizes("W * N", single=True)), Arg("group")))
