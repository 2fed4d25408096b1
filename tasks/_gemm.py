"""What the tensor-parallel GEMM tasks (all-gather + GEMM, GEMM + reduce-scatter, GEMM + all-gather, the
MLP block) have in common, declared once: the task dtypes and the rounding story of a GEMM whose K range
is split over ranks or chunks.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

from pkb_env.contract import Rounded, Rule, Sum

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
