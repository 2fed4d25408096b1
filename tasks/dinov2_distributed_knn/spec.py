"""dinov2_distributed_knn: DINOv2's k-NN evaluation with the training features split over ranks (PKB 79).

Every rank holds a block of the training set (features and labels) and its own test queries; every rank
needs, for its queries, the k most similar training features over all blocks and their labels. The work is
a (W Q, D) x (D, L/W) GEMM per rank, a top-k per row, and an exchange of every query's k best candidates to
the query's owner for a merge. PKB's reference serialises 4W collectives (per owner: broadcast the shape,
the queries, then gather sims and labels); the levers are one gather of all queries, one exchange of the
candidates, a fused top-k, and overlapping the GEMM with the exchanges.
"""
import torch

from pkb_env.contract import (Clause, Edge, Comm, Compute, Const, Cost, Exact, Group, Integers, Output, Preset,
                              Sharded, TaskSpec, Tensor)
from pkb_env.tasks._clauses import own_blocks

TIES = ("equal similarities: the lower global training index first (rank r's column j is index r * L / W + j)")


def coarse(features, draw):
    """Every rank's training features as signs (-1, 0, 1): many equal similarities, at the max_k-th too."""
    return features.sign()


def tie_at_k(trial) -> bool:
    """A query whose max_k-th and next similarities over the whole training set are equal."""
    train = trial.world.assemble(trial.inputs, "train_features_rank_T").double()
    k = trial.inputs[0]["max_k"]
    ranked = [(a["test_features_rank"].double() @ train).sort(dim=1, descending=True).values for a in trial.inputs]
    return any(bool((r[:, k - 1] == r[:, k]).any()) for r in ranked)


def golden(inputs, world):
    """Every rank's queries against the whole training set in float64 (every similarity an exact integer), a
    stable descending sort over the global index order, the first K."""
    train = world.assemble(inputs, "train_features_rank_T").double()
    labels = world.assemble(inputs, "train_labels_rank")[0]
    k = inputs[0]["max_k"]
    out = []
    for args in inputs:
        sims = args["test_features_rank"].double() @ train
        order = torch.sort(sims, dim=1, descending=True, stable=True).indices[:, :k]
        out.append((sims.gather(1, order).float(), labels[order]))
    return out


def cost(c):
    """Per rank: every rank's queries gathered (or the training set, whichever is fewer bytes; the candidates'
    exchange is not counted, since a rank whose candidates all lose could send none), the (W Q, D) x (D, L/W)
    GEMM, every input read and every output written once."""
    queries = Comm("all_gather", c["W"] * c.nbytes("test_features_rank"))
    train = Comm("all_gather", c["W"] * c.nbytes("train_features_rank_T"))
    return Cost(comm=c.cheapest((queries,), (train,)),
                compute=(Compute(2 * c["Q"] * c["D"] * c["L"], "matmul"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="dinov2_distributed_knn",
    title="DINOv2 distributed k-NN over a training set split across ranks",
    description="Every rank holds test_features_rank (Q, D), its own queries, and block r of the training set: "
                "train_features_rank_T (D, L / W), the transposed features of global training indices r * L / W "
                "to (r + 1) * L / W - 1, and their labels train_labels_rank (1, L / W) int64. Features are small "
                "integers. The similarity of a query and a training feature is their dot product, in float32 "
                "(an exact integer). For each of its queries, every rank must return the max_k most similar "
                "training features over all ranks' blocks, highest first, equal similarities by the lower global "
                "training index: sims (Q, max_k) float32 and their labels (Q, max_k) int64.",
    family="data",
    parallelism="data parallel: training set sharded over ranks, queries gathered, candidates merged per owner",
    pkb_id=79,
    origin="DINOv2 eval/knn.py (KnnModule: per-rank top-k over its training shard, merged on the owner)",
    inputs=(
        Tensor("test_features_rank", ("Q", "D"), dist=Integers(-2, 3), doc="this rank's queries"),
        Tensor("train_features_rank_T", ("D", "L"), dist=Integers(-2, 3), layout=Sharded(1),
               doc="this rank's block of the training features, transposed"),
        Tensor("train_labels_rank", (1, "L"), dtype="int64", dist=Integers(0, "C"), layout=Sharded(1),
               doc="their class labels"),
        Const("max_k", dim="K"),
        Group("group", "world", doc="the ranks holding the training blocks"),
    ),
    outputs=(
        Output("sims", ("Q", "K"), dtype="float32", doc="the K highest similarities of each query, highest first"),
        Output("labels", ("Q", "K"), dtype="int64", ties=TIES, doc="the labels of those training features"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=Exact("similarities of small integers are exact integers in float32; labels are integers"),
    edges=(Edge("coarse_features", "train_features_rank_T", coarse, "training features of -1, 0 and 1, many ties",
                everywhere=True),),
    clauses=(Clause("ties_by_index", "equal similarities by the lower global training index: a query whose max_k-th "
                    "and next similarities are equal", tie_at_k, "edge case coarse_features (most plain draws too)",
                    edge="coarse_features"),
             own_blocks("train_features_rank_T", what="the top k runs over every rank's block")),
    presets={
        "tiny": Preset({"Q": 4, "D": 16, "L": 48, "K": 5, "C": 6}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"Q": 32, "D": 384, "L": 16384, "K": 200, "C": 1000}, "bfloat16",
                        "PKB's shapes: 32 queries of 384 features per rank, 16384 training features over all "
                        "ranks (8192, 4096, 2048 per rank at W = 2, 4, 8), k = 200, 1000 classes"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-call, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to make its peers' training blocks without communicating)",
        "features are integers in [-2, 2] (in the task dtype) and the similarity is their float32 dot "
        "product, an exact integer whatever the summation order; PKB's unit-normalised bf16 features give "
        "similarities whose order depends on rounding, so its labels were compared with a float tolerance "
        "(rtol 1e-2); here both outputs are compared exactly, and the similarities are float32 (PKB: the "
        "task dtype)",
        "ties are common (integer similarities) and broken by a stated rule, the lower global training index "
        "first; PKB uses torch.topk, which defines no order among ties",
        "labels are random per call in [0, C) (PKB: global index mod 1000, a closed form a candidate could "
        "use instead of gathering them)",
        "the reference gathers every rank's queries once and exchanges the candidates once (PKB serialises 4W "
        "collectives: per owner rank a broadcast of the shape, of the queries and two gathers); the process "
        "group is an input the judge builds",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("dinov2_distributed_knn",
          differs="pkb-env states the tie rule of the top-k (the lower global train index first) and draws "
                  "features that tie, compared exactly; PKB takes torch.topk's order and checks labels at 1%", variant="pkb")
