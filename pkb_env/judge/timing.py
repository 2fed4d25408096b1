"""The timing protocol's settings and the statistics the judge draws from per-rank call times.

A call's step time is the slowest rank's time for that barrier-aligned call (a collective is done when
its last rank is). The figure of merit is a statistic over calls: the median on GPUs; the minimum on CPU
ranks, which time-slice the cores so that scheduling only ever adds time and the per-call distribution is
bimodal (measured: the median of one unchanged candidate moved 2.8x between runs, the minimum 1.26x;
docs/benchmarks.md). The p10-p90 spread relative to the median is reported beside it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from pkb_env.record import TimingResult


@dataclass(frozen=True)
class TimingProtocol:
    """How many calls to warm up and time, bounded by time rather than by a fixed count."""

    warmup_s: float = 0.1
    min_warmup: int = 3
    max_warmup: int = 200
    measure_s: float = 0.4
    min_calls: int = 10
    max_calls: int = 100
    warmup_sets: int = 4         # distinct input sets cycled through warm-up
    timed_samples: int = 3       # timed calls whose outputs are checked, chosen secretly after timing
    suspect_below: float = 0.5   # a time under this fraction of the roofline bound is not believed
    statistic: str = "median"    # "median" | "min": the figure of merit over timed calls

    def message(self) -> dict[str, float]:
        keys = ("warmup_s", "min_warmup", "max_warmup", "measure_s", "min_calls")
        return {k: v for k, v in asdict(self).items() if k in keys}


PROTOCOLS = {
    "cpu": TimingProtocol(statistic="min"),
    "cuda": TimingProtocol(statistic="median", warmup_s=0.2, measure_s=0.5, max_calls=200),
    "cuda-emulated": TimingProtocol(),  # never used: emulated ranks are not timed
}


def summarize(per_rank_times: list[list[float]], warmup_calls: int, statistic: str = "median") -> TimingResult:
    if statistic not in ("median", "min"):
        raise ValueError(f"timing statistic must be 'median' or 'min', got {statistic!r}")
    steps = np.max(np.asarray(per_rank_times, dtype=np.float64), axis=0)
    median = float(np.median(steps))
    p10, p90 = np.percentile(steps, [10, 90])
    return TimingResult(time_s=median if statistic == "median" else float(steps.min()), statistic=statistic,
                        median_s=median, spread=float((p90 - p10) / median) if median > 0 else 0.0,
                        min_s=float(steps.min()), max_s=float(steps.max()), calls=int(steps.size),
                        warmup_calls=warmup_calls)
