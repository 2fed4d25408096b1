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

from pkb_env.executors.operations import TimedCalls
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
    clock: str = "host"          # "host" (wall time across a full sync) | "events" (CUDA events, host cross-check)
    snapshot_bytes: int = 2 << 30  # device memory for copies of timed outputs; bounds the call count
    hidden_work_s: float = 50e-6   # host-minus-event gap beyond 2x the reference's plus this: work escaped

    def message(self) -> dict[str, float]:
        keys = ("warmup_s", "min_warmup", "max_warmup", "measure_s", "min_calls", "snapshot_bytes")
        return {k: v for k, v in asdict(self).items() if k in keys}


PROTOCOLS = {
    "cpu": TimingProtocol(statistic="min"),
    # GPU: long enough for the clocks to leave idle and for a small kernel to be timed thousands of times.
    "cuda": TimingProtocol(statistic="median", clock="events", warmup_s=0.3, max_warmup=20_000, measure_s=0.3,
                           max_calls=2_000),
    "cuda-emulated": TimingProtocol(),  # never used: emulated ranks are not timed
}


def summarize(calls: TimedCalls, protocol: TimingProtocol) -> TimingResult:
    if protocol.statistic not in ("median", "min"):
        raise ValueError(f"timing statistic must be 'median' or 'min', got {protocol.statistic!r}")
    use_events = protocol.clock == "events" and calls.events is not None
    steps = _slowest_rank(calls.events if use_events else calls.host)
    median = float(np.median(steps))
    p10, p90 = np.percentile(steps, [10, 90])
    gap = float(np.median(_slowest_rank(calls.host) - steps)) if use_events else None
    return TimingResult(time_s=median if protocol.statistic == "median" else float(steps.min()),
                        statistic=protocol.statistic, clock="events" if use_events else "host",
                        median_s=median, spread=float((p90 - p10) / median) if median > 0 else 0.0,
                        min_s=float(steps.min()), max_s=float(steps.max()), calls=int(steps.size),
                        warmup_calls=calls.warmup, input_sets=calls.sets, host_gap_s=gap)


def _slowest_rank(per_rank: list[list[float]]) -> np.ndarray:
    return np.max(np.asarray(per_rank, dtype=np.float64), axis=0)
