"""gemm_reducescatter: a row-parallel GEMM whose partial products are reduce-scattered by rows (PKB 16).

Megatron-LM's RowParallelLinear with sequence parallelism: the activations arrive split along the hidden
dimension, each rank multiplies its block by its rows of the weight, and a reduce-scatter sums the
partial (M, N) products and leaves each rank its block of rows (the sequence-parallel layout the next
norm wants). The lever is overlap: compute the partial product for one destination's rows at a time and
send it while the next is computed, or reduce in the GEMM's epilogue into peers' memory.
"""
from pkb_env.contract import Comm, Compute, Cost, Output, Preset, Sharded, TaskSpec, Tensor
from pkb_env.tasks._gemm import DTYPES, split_k_tolerance
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """The global product A (M, K) @ B (K, N) in float64, rounded once; rank r gets row block r."""
    a = world.assemble(inputs, "A").double()
    b = world.assemble(inputs, "B").double()
    return world.distribute((a @ b).to(inputs[0]["A"].dtype), "out")


def cost(c):
    """Per rank: 2*M*K*N/W FLOPs (its K-block of every row, or every K-block of its rows). Communication,
    the cheaper of: reduce-scatter the (M, N) partial products, or move the operands (every peer's B
    block, K/W*N, and its A block for this rank's rows, M/W*K/W, issued together), after which a rank
    computes its rows alone."""
    m, k, n, w, e = c["M"], c["K"], c["N"], c["W"], c.elem
    partials = (Comm("reduce_scatter", m * n * e),)
    operands = (Comm("all_gather", k * n * e), Comm("all_to_all", m * k // w * e, steps=0))
    return Cost(comm=c.cheapest(partials, operands), compute=(Compute(2 * m * k * n / w, "matmul"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="gemm_reducescatter",
    title="GEMM + reduce-scatter (row-parallel linear, sequence-parallel output)",
    description="Every rank holds A (M, K/W) and B (K/W, N): its K-block of the global activations (M, K) "
                "and weight (K, N). Rank r must return rows [r*M/W, (r+1)*M/W) of the global product A @ B "
                "(the sum over ranks of their A @ B), (M/W, N).",
    family="tensor",
    parallelism="tensor parallel: row-parallel GEMM, reduce-scatter into sequence-parallel rows "
                "(Megatron-LM RowParallelLinear, sequence_parallel=True)",
    pkb_id=16,
    origin="Megatron-LM RowParallelLinear with sequence parallelism (GEMM, then reduce-scatter of the "
           "partial products)",
    inputs=(
        Tensor("A", ("M", "K"), layout=Sharded(1), doc="this rank's K-block of the activations"),
        Tensor("B", ("K", "N"), layout=Sharded(0), doc="this rank's K-block of the weight's rows"),
    ),
    outputs=(Output("out", ("M", "N"), layout=Sharded(0), doc="this rank's row block of A @ B"),),
    golden=golden,
    cost=cost,
    # Each rank's GEMM sums K/W products in fp32 and rounds its partial to the dtype; the reduce-scatter
    # adds the W partials in the dtype.
    tolerance_rule=split_k_tolerance("K", "W"),
    clauses=(own_blocks("A", "B", what="the partial products summed are all different"),),
    presets={
        "tiny": Preset({"M": 24, "K": 24, "N": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "K": 512, "N": 1024}, "bfloat16",
                        "PKB's shapes: A (1024, 512/W), B (512/W, 1024) per rank"),
        "large": Preset({"M": 8192, "K": 4096, "N": 8192}, "bfloat16",
                        "the reduce-scatter (128 MiB of partials) and the GEMM take similar time on H200s"),
    },
    dtypes=DTYPES,
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its peers' partial products without communicating)",
        "A and B are declared as K-blocks of global (M, K) and (K, N) matrices, which is what PKB's "
        "per-rank shapes mean; the golden multiplies the global matrices",
        "a `large` preset (M=N=8192, K=4096) where the reduce-scatter and the GEMM take similar time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("gemm_reducescatter", params=(Arg("A_local", "A"), Arg("B_local", "B")))
