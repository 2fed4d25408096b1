"""allgather_gemm: gather the activations' hidden-dimension blocks, then a column-parallel GEMM (PKB 12).

Each rank holds a K-block of the activations and a column block of the weight; it needs the whole
activation matrix before its GEMM can finish. The lever is overlap: multiply the blocks already here
(A_j @ B[K-block j], accumulated into the output) while the others are in flight, or fuse the gather into
the GEMM's operand loads from peers' memory.
"""
from pkb_env.contract import Output, Sharded, TaskSpec, Tensor
from pkb_env.tasks._gemm import DTYPES, allgather_gemm_cost, allgather_gemm_presets, split_k_tolerance
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """The global product A (M, K) @ B (K, W*N) in float64, rounded once; rank r gets column block r."""
    a = world.assemble(inputs, "A").double()
    b = world.assemble(inputs, "B").double()
    return world.distribute((a @ b).to(inputs[0]["A"].dtype), "out")


SPEC = TaskSpec(
    name="allgather_gemm",
    title="All-gather + GEMM (column-parallel linear, input split along K)",
    description="Every rank holds A (M, K/W), its block of columns of the global activations (M, K), and B "
                "(K, N), its column block of the global weight (K, W*N). Every rank must return A_full @ B, "
                "(M, N), where A_full is the column-wise concatenation of all ranks' A in rank order.",
    family="tensor",
    parallelism="tensor parallel: all-gather of the activations, then a column-parallel GEMM",
    pkb_id=12,
    origin="Megatron-LM ColumnParallelLinear fed by an all-gather (the all-gather + GEMM of async tensor "
           "parallelism in PyTorch and TransformerEngine's userbuffers)",
    inputs=(
        Tensor("A", ("M", "K"), layout=Sharded(1), doc="this rank's K-block of the activations"),
        Tensor("B", ("K", "W * N"), layout=Sharded(1), doc="this rank's column block of the weight"),
    ),
    outputs=(Output("out", ("M", "W * N"), layout=Sharded(1), doc="this rank's column block of A @ B"),),
    golden=golden,
    cost=allgather_gemm_cost,
    # The reference runs one GEMM over K; a fused candidate multiplies the K-blocks as they arrive and adds
    # the W partial products, possibly in the dtype. Both are inside the split-K rule.
    tolerance_rule=split_k_tolerance("K", "W"),
    clauses=(own_blocks("A", "B", what="the gathered columns come from every rank"),),
    presets=allgather_gemm_presets("PKB's shapes: A (1024, 512/W), B (512, 1024) per rank"),
    dtypes=DTYPES,
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its peers' blocks without communicating)",
        "B is declared as this rank's column block of a global (K, W*N) weight, which is what PKB's "
        "independent per-rank B means; the golden multiplies the global matrices",
        "a `large` preset (M=8192, K=4096, N=2048) where the all-gather and the GEMM take similar time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("allgather_gemm", aliases=("gemm_allgather",), params=(Arg("A_local", "A"), Arg("B")))
