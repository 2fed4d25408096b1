"""The default reward: fixed values for failures in verdict order, a graded bonus for fast correct code.

Why this shape (docs/architecture.md, "Rewards"): a policy must always prefer "runs" to "crashes",
"correct" to "wrong", and among correct answers prefer faster ones, without any failure ever outscoring a
correct answer. Failures therefore get constants in strict verdict order; correct answers get

    value = correct_base + w_speedup * s + w_roofline * f

with s = log(speedup) mapped linearly from [log(min_speedup), log(max_speedup)] onto [0, 1] (clipped:
speed is multiplicative, and a clip keeps one lucky timing from dominating a batch), the speedup credited from
the step's 90% interval (`speedup_credit: interval`, base.credited_speedup: no credit while it straddles 1x, its
lower end above, so that identical code earns the same reward every step), and f the roofline
fraction clipped to [0, 1] (how close to the hardware bound, which speedup alone cannot say when the
reference is already good). The value always equals the sum of the numeric terms base + speedup_term +
roofline_term, which `terms` reports.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

from pkb_env.record import EvaluationRecord, Verdict

from .base import (RewardFunction, RewardResult, Term, check_credit, credited_speedup, effective_verdict,
                   flag_reason, number, performance_status, unjudged)

# failure verdicts, worst first, each with the config key holding its value
FAILURE_KEYS: tuple[tuple[Verdict, str], ...] = (
    (Verdict.FLAGGED, "flagged"),
    (Verdict.UNPARSABLE, "unparsable"),
    (Verdict.BUILD_ERROR, "build_error"),
    (Verdict.RUNTIME_ERROR, "runtime_error"),
    (Verdict.WRONG, "wrong"),
)


class ShapedReward(RewardFunction):
    """Graded reward; weights in configs/rewards/default.yaml (keep DEFAULTS and that file equal)."""

    kind: ClassVar[str] = "shaped"
    DEFAULTS: ClassVar[Mapping[str, Any]] = {
        "flagged": -1.0,
        "unparsable": -0.8,
        "build_error": -0.6,
        "runtime_error": -0.5,
        "wrong": -0.2,
        "correct_base": 0.3,
        "w_speedup": 0.5,
        "w_roofline": 0.2,
        "min_speedup": 0.25,
        "max_speedup": 8.0,
        "correct_without_performance": None,  # None: correct_base (no credit for unmeasured speed)
        "speedup_credit": "interval",         # base.credited_speedup: "interval" | "point"
    }

    def _validate(self, config: dict[str, Any]) -> None:
        values = {key: number(config, key) for key in (*(k for _, k in FAILURE_KEYS), "correct_base",
                                                        "w_speedup", "w_roofline", "min_speedup",
                                                        "max_speedup")}
        for (_, lo), (_, hi) in zip(FAILURE_KEYS[:-2], FAILURE_KEYS[1:-1]):
            if values[lo] > values[hi]:
                raise ValueError(f"{hi}: {values[hi]} is below {lo} ({values[lo]}); failure values must "
                                 f"not decrease along flagged <= unparsable <= build_error <= runtime_error")
        if values["runtime_error"] >= values["wrong"]:
            raise ValueError(f"wrong: {values['wrong']} must be above runtime_error ({values['runtime_error']}); "
                             f"raise wrong or lower runtime_error")
        if values["correct_base"] <= values["wrong"]:
            raise ValueError(f"correct_base: {values['correct_base']} must be above wrong ({values['wrong']}), "
                             f"or a correct answer could score no better than a wrong one; raise correct_base")
        for key in ("w_speedup", "w_roofline"):
            if values[key] <= 0:
                raise ValueError(f"{key}: {values[key]} must be > 0 so the reward strictly increases with "
                                 f"{'speedup' if key == 'w_speedup' else 'roofline fraction'}; use a small "
                                 f"positive weight to de-emphasise it")
        if values["min_speedup"] <= 0:
            raise ValueError(f"min_speedup: {values['min_speedup']} must be > 0 (it is a ratio on a log scale)")
        if values["min_speedup"] >= values["max_speedup"]:
            raise ValueError(f"max_speedup: {values['max_speedup']} must be above min_speedup "
                             f"({values['min_speedup']}); e.g. min_speedup 0.25, max_speedup 8")
        if config["correct_without_performance"] is None:
            config["correct_without_performance"] = values["correct_base"]
        cwp = number(config, "correct_without_performance")
        top = values["correct_base"] + values["w_speedup"] + values["w_roofline"]
        if not values["wrong"] < cwp <= top:
            raise ValueError(f"correct_without_performance: {cwp} must be above wrong ({values['wrong']}) and "
                             f"at most the best correct score ({top}); null means correct_base")
        config.update(values, correct_without_performance=cwp, speedup_credit=check_credit(config))

    @property
    def bounds(self) -> tuple[float, float]:
        c = self.config
        return c["flagged"], c["correct_base"] + c["w_speedup"] + c["w_roofline"]

    def speedup_score(self, speedup: float) -> float:
        """log(speedup) mapped from [log(min_speedup), log(max_speedup)] onto [0, 1], clipped."""
        lo, hi = math.log(self.config["min_speedup"]), math.log(self.config["max_speedup"])
        return min(1.0, max(0.0, (math.log(speedup) - lo) / (hi - lo)))

    def __call__(self, record: EvaluationRecord) -> RewardResult:
        c = self.config
        if (result := unjudged(record)) is not None:
            return result
        verdict = effective_verdict(record)
        terms: dict[str, Term] = {"verdict": verdict.value, "performance": "not_applicable",
                                  "base": 0.0, "speedup_term": 0.0, "roofline_term": 0.0}
        if verdict is not Verdict.CORRECT:
            terms["base"] = c[dict(FAILURE_KEYS)[verdict]]
            if verdict is Verdict.FLAGGED:
                terms["reason"] = flag_reason(record)
            return RewardResult(terms["base"], terms)

        status, why = performance_status(record)
        terms["performance"] = status
        if status != "measured":
            terms["base"] = c["correct_without_performance"]
            terms["reason"] = why
            return RewardResult(terms["base"], terms)

        speedup, how = credited_speedup(record, c["speedup_credit"])
        s = self.speedup_score(speedup)
        terms.update(base=c["correct_base"], speedup=float(record.speedup), credited_speedup=speedup,
                     speedup_credit=how, speedup_score=s, speedup_term=c["w_speedup"] * s)
        fraction = record.roofline_fraction
        if fraction is None or not math.isfinite(fraction):
            terms["roofline"] = "unavailable"  # no traffic model / bound: earns nothing, said so
        else:
            f = min(1.0, max(0.0, float(fraction)))
            terms.update(roofline_fraction=float(fraction), roofline_score=f, roofline_term=c["w_roofline"] * f)
        value = terms["base"] + terms["speedup_term"] + terms["roofline_term"]
        return RewardResult(value, terms)
