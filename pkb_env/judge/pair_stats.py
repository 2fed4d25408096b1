"""The statistics of a step's pairs (docs/timing.md, "The estimate and its interval"): the speedup's estimate
from the pairs' log-ratios, its 90% interval, and whether that interval is narrow enough to stop timing
(`settled`: the burst series adds pairs until it is, or its budget ends)."""
from __future__ import annotations

import functools
import math

import numpy as np


def _walsh_averages(values: np.ndarray) -> np.ndarray:
    """(x_i + x_j) / 2 for every i <= j, sorted."""
    i, j = np.triu_indices(len(values))
    return np.sort((values[i] + values[j]) / 2)


def pseudo_median(values: np.ndarray) -> float:
    """The Hodges-Lehmann estimate: the median of the Walsh averages. With a step's pairs as few and as spread
    as they are (docs/measurements/2026-12-03-timing-h200.md), this estimate's spread over steps is below the
    plain median's where the log-ratios are normal or heavier-tailed (as efficient as the mean at normal noise,
    95%, against the median's 64%), and it stays robust: nearly 3 in 10 pairs may be wild before it moves
    without bound (docs/timing.md, "The estimate and its interval")."""
    return float(np.median(_walsh_averages(np.asarray(values, dtype=np.float64))))


def signed_rank_interval(values: np.ndarray, level: float = 0.9) -> tuple[float | None, float | None]:
    """An interval for the pseudo-median of `values` at confidence at least `level` (Wilcoxon's signed-rank
    interval): the k-th smallest and k-th largest Walsh averages, k - 1 the largest count with P(T <= k - 1) <=
    (1 - level) / 2, T the signed-rank statistic of n symmetric values (its exact distribution: the subsets of
    {1..n} by their sums). It assumes the log-ratios spread symmetrically about their centre, as the halves of
    an ABBA pair make them for equal codes. (None, None) with fewer than 5 values: no k exists."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    k = _outside(n, level)
    if k == 0:
        return None, None
    walsh = _walsh_averages(values)
    return float(walsh[k - 1]), float(walsh[n * (n + 1) // 2 - k])


@functools.lru_cache(maxsize=256)
def _outside(n: int, level: float) -> int:
    """k for `signed_rank_interval` over n values (0: none exists); cached, as the burst series asks it after
    every burst (`settled`) and its count of subsets grows as n^3."""
    most = n * (n + 1) // 2
    subsets = [1] + [0] * most            # subsets[w]: subsets of {1..n} whose members sum to w
    for member in range(1, n + 1):
        for w in range(most, member - 1, -1):
            subsets[w] += subsets[w - member]
    allowed, k, below = (1 - level) / 2 * 2 ** n, 0, 0
    while below + subsets[k] <= allowed:   # P(T <= k) within the tail: k + 1 averages may lie outside
        below += subsets[k]
        k += 1
    return k


def settled(ratios: np.ndarray, target: float, level: float = 0.9) -> bool:
    """Whether the interval of the pseudo-median of `ratios` (reference / candidate, one per pair) lies within
    `target` of the estimate on both sides (in logs: log(1 + target)); never with fewer than 5 pairs, where no
    interval exists. Stopping on the interval's width, which the pairs' location does not decide, leaves the
    estimate where a fixed count of pairs would put it."""
    ratios = np.asarray(ratios, dtype=np.float64)
    logs = np.log(ratios[np.isfinite(ratios) & (ratios > 0)])
    low, high = signed_rank_interval(logs, level)
    if low is None:
        return False
    centre = pseudo_median(logs)
    return max(high - centre, centre - low) <= math.log1p(target)
