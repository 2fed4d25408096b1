"""fast_p (KernelBench / ParallelKernelBench): 1 if the answer is correct and faster than p x the reference.

A binary reward is the benchmark's headline metric (mean over tasks = the fast_p score), so training on
it optimises exactly what is reported. It cannot rank failures, so every failure, flagged or not, is 0; a
correct answer whose speed was not measured (or not trusted) is 0 too, with a term saying why, since "faster
than p" cannot be claimed without a trustworthy time; so is one whose speedup's 90% interval (from the step's
paired bursts) reaches down to p (`speedup_credit: interval`, the default; "point" compares the point estimate
alone): it is not shown faster than p. That is how the fast_p metric of an evaluation
(pkb_env/evaluation/metrics.py) and the env's termination count a sample, so the reward is the metric, sample
by sample.
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

from pkb_env.record import EvaluationRecord, Verdict

from .base import (RewardFunction, RewardResult, Term, check_credit, effective_verdict, flag_reason, number,
                   performance_status, unjudged)


class FastP(RewardFunction):
    """1.0 iff correct, not flagged, performance measured and trusted, and speedup > p (strictly), its interval's
    lower end too where it has one."""

    kind: ClassVar[str] = "fast_p"
    DEFAULTS: ClassVar[Mapping[str, Any]] = {"p": 1.0, "speedup_credit": "interval"}

    def _validate(self, config: dict[str, Any]) -> None:
        p = number(config, "p")
        if p < 0:
            raise ValueError(f"p: {p} must be >= 0 (fast_0 = correctness, fast_1 = faster than the reference)")
        config["p"] = p
        config["speedup_credit"] = check_credit(config)

    @property
    def bounds(self) -> tuple[float, float]:
        return 0.0, 1.0

    def __call__(self, record: EvaluationRecord) -> RewardResult:
        p = self.config["p"]
        if (result := unjudged(record)) is not None:
            return result
        verdict = effective_verdict(record)
        terms: dict[str, Term] = {"verdict": verdict.value, "p": p, "performance": "not_applicable"}
        if verdict is not Verdict.CORRECT:
            terms["reason"] = flag_reason(record) if verdict is Verdict.FLAGGED else f"not correct ({verdict.value})"
            return RewardResult(0.0, terms)
        status, why = performance_status(record)
        terms["performance"] = status
        if status != "measured":
            terms["reason"] = why
            return RewardResult(0.0, terms)
        speedup = float(record.speedup)
        terms["speedup"] = speedup
        interval = record.speedup_interval if self.config["speedup_credit"] == "interval" else None
        if interval is not None:
            terms["speedup_low"] = interval[0]
        low = speedup if interval is None else min(speedup, interval[0])
        if low > p:
            return RewardResult(1.0, terms)
        terms["reason"] = (f"speedup {speedup:.4g} is not above p={p:g}" if speedup <= p else
                           f"speedup {speedup:.4g} is not shown above p={p:g}: its 90% interval starts at {low:.4g}")
        return RewardResult(0.0, terms)
