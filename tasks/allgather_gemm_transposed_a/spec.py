"""allgather_gemm_transposed_a: all-gather + GEMM with the activations stored K-major (PKB 11).

PKB 11 is PKB 12's all-gather GEMM with the operand transposed so that K-blocks are contiguous and the
gather is a single all_gather_into_tensor (TransformerEngine's userbuffers pick the layout of the gathered
operand for the same reason). Here the activations arrive already K-major, so the kernel's choices are
about the transposed operand: the gather needs no copy, and the GEMM reads A^T (a "TN" GEMM). The levers
are those of allgather_gemm: overlap the gather with partial GEMMs over the blocks already here.
"""
from pkb_env.contract import Output, Sharded, TaskSpec, Tensor
from pkb_env.tasks._gemm import DTYPES, allgather_gemm_cost, allgather_gemm_presets, split_k_tolerance
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """The global product A (M, K) @ B (K, W*N), with A = (A^T)^T, in float64 and rounded once; rank r gets
    column block r."""
    a_t = world.assemble(inputs, "A_t").double()
    b = world.assemble(inputs, "B").double()
    return world.distribute((a_t.t() @ b).to(inputs[0]["A_t"].dtype), "out")


SPEC = TaskSpec(
    name="allgather_gemm_transposed_a",
    title="All-gather + GEMM, activations stored transposed (K-major)",
    description="Every rank holds A_t (K/W, M), its block of rows of the transposed activations A^T (K, M), and "
                "B (K, N), its column block of the global weight (K, W*N). Every rank must return A @ B, (M, N), "
                "where A^T is the row-wise concatenation of all ranks' A_t in rank order.",
    family="tensor",
    parallelism="tensor parallel: all-gather of K-major activations, then a column-parallel GEMM",
    pkb_id=11,
    origin="all-gather + GEMM of async tensor parallelism (PyTorch symmetric memory, TransformerEngine "
           "userbuffers) with the gathered operand K-major",
    inputs=(
        Tensor("A_t", ("K", "M"), layout=Sharded(0), doc="this rank's K-block of the transposed activations"),
        Tensor("B", ("K", "W * N"), layout=Sharded(1), doc="this rank's column block of the weight"),
    ),
    outputs=(Output("out", ("M", "W * N"), layout=Sharded(1), doc="this rank's column block of A @ B"),),
    golden=golden,
    cost=allgather_gemm_cost,
    tolerance_rule=split_k_tolerance("K", "W"),
    clauses=(own_blocks("A_t", "B", what="the gathered rows come from every rank"),),
    presets=allgather_gemm_presets("PKB's sizes: A^T (512/W, 1024), B (512, 1024) per rank"),
    dtypes=DTYPES,
    departures=(
        "the activations arrive K-major, A_t (K/W, M) per rank: PKB passes the same (M, K/W) blocks as "
        "PKB 12 and transposes them inside the reference, which makes the two problems one (same inputs, "
        "same outputs); with the operand K-major this task asks what a transposed operand changes",
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to make its peers' blocks without communicating)",
        "B is declared as this rank's column block of a global (K, W*N) weight, which is what PKB's "
        "independent per-rank B means; the output is a plain (M, N) tensor, not PKB's transposed view",
        "a `large` preset (M=8192, K=4096, N=2048) where the all-gather and the GEMM take similar time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("allgather_gemm_AT", aliases=("gemm_allgather_AT",),
          params=(Arg("A_local", "A_t", to="transpose"), Arg("B")))
