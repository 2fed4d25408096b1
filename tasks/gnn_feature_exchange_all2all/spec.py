"""gnn_feature_exchange_all2all: gather requested node features and exchange them by a rotated all-to-all
(PKB 65).

Distributed GNN sampling (DGL's distributed neighbour sampler) asks every rank for the features of the
nodes it owns: each rank gathers the requested rows (by inverse ids, as returned by a unique) and an
all-to-all delivers R rows to every peer, in a chunk order rotated by the rank. Pure data movement, small
at PKB's size (latency-bound) and bandwidth-bound in `large`: the levers are fusing the index gather into
the send (no gathered copy) and the rotation into the receive (no reordering copy).
"""
import torch

from pkb_env.contract import Comm, Cost, Exact, Group, Integers, Output, PerRank, Preset, TaskSpec, Tensor
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """Every rank's gathered chunks, placed by the rotation: chunk i of rank r's output is chunk (W - i) mod W
    of rank (r + i) mod W's gathered rows."""
    w = world.world_size
    chunks = [a["local_features"][a["seed_inverse_ids"]].chunk(w) for a in inputs]
    return [torch.cat([chunks[(r + i) % w][(w - i) % w] for i in range(w)]) for r in range(w)]


def cost(c):
    """Per rank: one all-to-all of its (W*R, H) gathered rows (its own chunk included, as nccl-tests count);
    the requested rows read, the ids read and the output written once."""
    return Cost(comm=(Comm("all_to_all", c.nbytes("out")),), memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="gnn_feature_exchange_all2all",
    title="GNN feature exchange: index gather + rotated all-to-all",
    description="Every rank holds local_features (W*R, H) and seed_inverse_ids (W*R,) int64 in [0, W*R). Let "
                "G_r = local_features[seed_inverse_ids] on rank r, cut into W chunks of R rows. Every rank r must "
                "return (W*R, H) whose chunk i is chunk (W - i) mod W of G_((r + i) mod W) (rank r sends its chunk "
                "(j - r) mod W to rank j, and what rank j sends lands at chunk (j - r) mod W).",
    family="graph",
    parallelism="graph parallel: feature rows requested by peers, exchanged by all-to-all",
    pkb_id=65,
    origin="DGL distributed sampling (feature exchange by all-to-all, rank-rotated chunk order)",
    inputs=(
        Tensor("local_features", ("W * R", "H"), layout=PerRank(), doc="this rank's node features"),
        Tensor("seed_inverse_ids", ("W * R",), dtype="int64", dist=Integers(0, "W * R"), layout=PerRank(),
               doc="for each requested row, which row of local_features it is (repeats allowed)"),
        Group("group", "world", doc="the ranks exchanging features"),
    ),
    outputs=(Output("out", ("W * R", "H"), layout=PerRank(), compare="exact",
                    doc="the rows the peers gathered for this rank, chunk i from rank (r + i) mod W"),),
    golden=golden,
    cost=cost,
    tolerance_rule=Exact("pure data movement: every row must arrive bit-exact"),
    clauses=(own_blocks("local_features", what="every rank's features move"),),
    presets={
        "tiny": Preset({"R": 2, "H": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"R": 4, "H": 128}, "bfloat16",
                        "PKB's shapes at W = 4: 4 rows of 128 per peer (PKB: 8, 4, 2 rows at W = 2, 4, 8); "
                        "latency-bound"),
        "large": Preset({"R": 8192, "H": 256}, "bfloat16",
                        "a sampled mini-batch's features: 4 MiB per peer, bandwidth-bound on NVLink"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "seed_inverse_ids are random per trial and rank, with repeats (PKB passes arange, so the gather is "
        "the identity and a candidate that skips it passes)",
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its peers' rows without communicating)",
        "PKB's counts_sent and counts_received (R for every peer) are not arguments: the shapes give R; and "
        "R is fixed per preset rather than 8, 4, 2 at W = 2, 4, 8; the process group is an input the judge "
        "builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Computed, Pkb  # noqa: E402  (kept apart from the task's own)


def _pkb_counts(call):
    """PKB passes R rows for every peer as Python lists; this task's shapes give R."""
    return [call.values["seed_inverse_ids"].shape[0] // call.world_size] * call.world_size


PKB = Pkb("gnn_feature_exchange_all2all",
          params=(Arg("local_features"), Arg("seed_inverse_ids"), Computed("counts_sent", _pkb_counts, "[R] * W"),
                  Computed("counts_received", _pkb_counts, "[R] * W"), Arg("group")))
