"""sparse_gather_matmul: a sparse operator as an input, in float32 or float64 (contract v3 example).

The pattern of PKB's GNN feature exchange backward (66) and spherical convolution (62): each rank holds a
sparse operator over every node, drawn from its own secret stream (positions and values), gathers the
features and applies it. The cost model counts the operator's stored values and indices (`c.nbytes("A")`).
"""
from pkb_env.contract import Comm, Compute, Cost, Output, Preset, Sharded, Sparse, Sum, TaskSpec, Tensor

DENSITY = 0.25


def golden(inputs, world):
    x = world.assemble(inputs, "x").double()
    return [(args["A"].to_dense().double() @ x).to(args["x"].dtype) for args in inputs]


def cost(c):
    nnz = round(DENSITY * c["N"] * c["W"] * c["N"])
    return Cost(comm=(Comm("all_gather", c.nbytes("x") * c["W"]),),
                compute=(Compute(2 * nnz * c["D"], "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="contract_v3_tasks.sparse_gather_matmul",
    title="Gather node features, apply a sparse operator",
    description="Every rank holds A, its rows of a sparse operator over all W * N nodes (COO), and x, its "
                "block of the node features; return A @ (every rank's x, in rank order).",
    family="collective",
    pkb_id=None,
    origin="contract v3 example (tests)",
    parallelism="graph: feature exchange, then sparse aggregation",
    inputs=(Tensor("A", ("N", "W * N"), sparse=Sparse("coo", density=DENSITY),
                   doc="this rank's rows of the operator"),
            Tensor("x", ("W * N", "D"), layout=Sharded(0), doc="this rank's block of the node features")),
    outputs=(Output("out", ("N", "D")),),
    golden=golden,
    cost=cost,
    tolerance_rule=Sum(f"{DENSITY} * W * N", 1, "dtype", what="each output sums its row's entries"),
    presets={"tiny": Preset({"N": 6, "D": 4}, "float32", "CPU ranks"),
             "bench": Preset({"N": 4096, "D": 128}, "float32", "a graph partition per rank")},
    dtypes=("float32", "float64"),
)
