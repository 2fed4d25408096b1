"""What the tensor-parallel GEMM tasks (all-gather + GEMM, GEMM + reduce-scatter, GEMM + all-gather, the
MLP block) have in common, declared once: the task dtypes and the rounding story of a GEMM whose K range
is split over ranks or chunks.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

from pkb_env.contract import Comm, Compute, Cost, CostContext, Preset, Rounded, Rule, Sum

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""fp32 for CPU ranks; the two 16-bit types tensor cores run."""


def split_k_tolerance(terms: str, parts: str, magnitude: str = "1") -> Rule:
    """A GEMM of `terms` products of RMS `magnitude` per output element, whose K range is (or may be) cut
    into `parts` partial products: each part accumulates in fp32 (tensor cores and CPU GEMMs do), is
    rounded once to the dtype, and the parts are added in the dtype (a collective's hops, or a fused kernel
    adding chunks as they arrive). A candidate may cut K differently from the reference: the rule allows
    any cut into at most `parts` pieces, and a single GEMM is inside it."""
    ratio = f"sqrt({terms} / {parts})"
    part = ratio if magnitude == "1" else f"{magnitude} * {ratio}"
    return (Sum(terms, magnitude, "float32", what="per-element sums accumulated in fp32")
            + Rounded(parts, part, what="partial sums (one per K-block or rank), each rounded to the dtype")
            + Sum(parts, part, "dtype", what="partial sums added in the dtype"))


def allgather_gemm_cost(c: CostContext) -> Cost:
    """An all-gather of the activations' K-blocks (M, K/W) feeding a GEMM with this rank's weight columns
    (K, N). Per rank: 2*M*K*N FLOPs. Communication, the cheaper of: gather the other ranks' K-blocks of
    the activations ((W-1)/W of M*K), or move the work (send each peer the K-block of its weight columns,
    K/W*N, and get back its partial product, M*N, from every peer)."""
    m, k, n, e = c["M"], c["K"], c["N"], c.elem
    gather = (Comm("all_gather", m * k * e),)
    partials = (Comm("all_to_all", k * n * e), Comm("all_to_all", c["W"] * m * n * e))
    return Cost(comm=c.cheapest(gather, partials), compute=(Compute(2 * m * k * n, "matmul"),),
                memory_bytes=c.io_bytes())


def allgather_gemm_presets(bench_note: str) -> dict[str, Preset]:
    """`tiny` for CPU ranks, `bench` at PKB's sizes (M=1024, K=512, N=1024 per rank), `large` where the
    all-gather and the GEMM take similar time on H200s. A fresh dict per call."""
    return {"tiny": Preset({"M": 16, "K": 24, "N": 8}, "float32", "CPU ranks, milliseconds"),
            "bench": Preset({"M": 1024, "K": 512, "N": 1024}, "bfloat16", bench_note),
            "large": Preset({"M": 8192, "K": 4096, "N": 2048}, "bfloat16",
                            "the all-gather (64 MiB of activations) and the GEMM take similar time on H200s")}
