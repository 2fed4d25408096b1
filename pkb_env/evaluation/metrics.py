"""The metrics of an evaluation, as KernelBench and ParallelKernelBench define them.

- pass@k: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k), for a task with n
  samples of which c are correct; the suite value is its mean over tasks.
- fast_p: the fraction of tasks with at least one sample that is correct and has speedup > p (strictly),
  the lower end of its 90% interval from the step's paired bursts above p too where it has one (a sample
  whose pairs straddle p is not shown to be faster than p: docs/timing.md, "Paired speedup").
  fast_0 is the fraction of tasks with a correct sample (timed or not), as KernelBench defines it. Where
  the executor does not measure performance at all, fast_p for p > 0 is None (not 0): nothing was timed.
"""
from __future__ import annotations

import math
from typing import Iterable, Protocol


class Row(Protocol):
    """What the metrics read of a judged sample (evaluation/report.py, SampleResult)."""

    task: str
    correct: bool
    speedup: float | None
    speedup_low: float | None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): the chance that k of the n samples, drawn without replacement,
    hold at least one of the c correct ones. 1 - C(n-c, k) / C(n, k)."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"pass_at_k: {name} must be an integer, got {value!r}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}; draw at least k samples per task")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _fast(row: Row, p: float) -> bool:
    if not row.correct:
        return False
    if p == 0:
        return True  # KernelBench's fast_0: correctness alone
    return (row.speedup is not None and math.isfinite(row.speedup) and row.speedup > p
            and (row.speedup_low is None or row.speedup_low > p))


def fast_p(rows: Iterable[Row], p: float) -> float | None:
    """Fraction of the tasks in `rows` with ANY sample that is correct and has speedup > p (p = 0: correct)."""
    if p < 0:
        raise ValueError(f"fast_p: p must be >= 0, got {p}")
    hits: dict[str, bool] = {}
    for row in rows:
        hits[row.task] = hits.get(row.task, False) or _fast(row, p)
    if not hits:
        return None
    return sum(hits.values()) / len(hits)
