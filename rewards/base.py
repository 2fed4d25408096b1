"""What every reward is: a pure, bounded function of one EvaluationRecord, with its terms reported.

Rewards read only the record (never the clock, the filesystem or a random generator), so the same record
always gets the same reward; that is what makes a reward reproducible from a logged `record.to_dict()`.
Each reward also states its `bounds`, so a trainer can normalise without guessing, and reports every term
it used, so that `info["reward_terms"]` explains the number.
"""
from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from pkb_env.record import EvaluationRecord, Verdict

Term = float | str


@dataclass(frozen=True)
class RewardResult:
    """The scalar the agent is trained on and the named terms it was built from."""

    value: float
    terms: dict[str, Term] = field(default_factory=dict)


class RewardFunction(abc.ABC):
    """A reward constructed from a config dict (the YAML under configs/rewards/ minus nothing).

    Subclasses declare `kind` (the YAML's `kind:`), `DEFAULTS` (every accepted key with its default) and
    implement `_validate` and `__call__`. Unknown keys are rejected here, so a typo in a YAML file fails
    at load time instead of silently leaving a default in place.
    """

    kind: ClassVar[str]
    DEFAULTS: ClassVar[Mapping[str, Any]]
    # keys every config may carry besides the subclass's own
    COMMON_KEYS: ClassVar[frozenset[str]] = frozenset({"kind", "name"})

    def __init__(self, config: Mapping[str, Any] | None = None, *, name: str | None = None):
        config = dict(config or {})
        kind = config.pop("kind", self.kind)
        if kind != self.kind:
            raise ValueError(f"kind: {kind!r} given to {type(self).__name__}, which is kind {self.kind!r}; "
                             f"use load_reward() to pick the class from the config's kind")
        config_name = config.pop("name", None)
        unknown = sorted(set(config) - set(self.DEFAULTS))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown key for a {self.kind!r} reward "
                             f"(unknown: {unknown}); accepted keys: {sorted(self.DEFAULTS)}")
        self.name: str = name or config_name or self.kind
        self.config: dict[str, Any] = {**self.DEFAULTS, **config}
        self._validate(self.config)

    @abc.abstractmethod
    def _validate(self, config: dict[str, Any]) -> None:
        """Raise ValueError naming the offending key and the fix."""

    @property
    @abc.abstractmethod
    def bounds(self) -> tuple[float, float]:
        """The lowest and highest value this reward can return."""

    @abc.abstractmethod
    def __call__(self, record: EvaluationRecord) -> RewardResult:
        ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, config={self.config!r})"


def number(config: Mapping[str, Any], key: str) -> float:
    """A finite real number from the config, or a ValueError naming the key."""
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{key}: must be a finite number, got {value!r}")
    return float(value)


def unjudged(record: EvaluationRecord) -> RewardResult | None:
    """0, with the reason, for a step the judge could not judge (Verdict.JUDGE_ERROR), else None.

    Such a record says nothing of the code, so no value may rank it against others; 0 lies inside every
    reward's bounds, and `terms["scored"] == "no"` lets a trainer drop the sample (the TRL reward over a
    pool returns None for it, TRL's own "no reward for this sample")."""
    if record.verdict is not Verdict.JUDGE_ERROR:
        return None
    return RewardResult(0.0, {"verdict": Verdict.JUDGE_ERROR.value, "scored": "no", "performance": "not_applicable",
                              "reason": record.error or "the judge failed"})


def effective_verdict(record: EvaluationRecord) -> Verdict:
    """The verdict the reward ranks: any exploit flag overrides what the pipeline concluded.

    A candidate that tampered with the judge may still have produced a CORRECT verdict (that is the
    point of tampering), so the flag, not the verdict, decides.
    """
    if record.exploit_flags:
        return Verdict.FLAGGED
    if record.verdict is None:
        raise ValueError(f"record for task {record.task!r} has no verdict (stopped at stage "
                         f"{record.stage.value!r}); the pipeline must set one before the reward is computed")
    return record.verdict


def flag_reason(record: EvaluationRecord) -> str:
    codes = [f.code for f in record.exploit_flags]
    return "exploit flags: " + ", ".join(codes) if codes else "verdict flagged"


def credited_speedup(record: EvaluationRecord, credit: str = "interval") -> tuple[float, str]:
    """The speedup a reward credits, and how it was read from the record.

    credit "interval" (the default; docs/architecture.md, "Rewards"): the step's 90% interval from its paired
    bursts decides. Wholly above 1, the lower end counts (the speedup the pairs show at least); wholly below 1,
    the upper end (the slowdown they show at least); straddling 1, exactly 1 (not distinguishable from the
    reference: no credit and no penalty). So identical code earns the same reward every step, where the point
    estimate of a speedup near 1 would pay noise. A record without an interval (too few pairs) is credited its
    point estimate. credit "point": always the point estimate.
    """
    speedup = float(record.speedup)
    interval = record.speedup_interval if credit == "interval" else None
    if interval is None:
        return speedup, "point estimate" if credit == "point" else "point estimate (no interval)"
    low, high = interval
    if low > 1.0:
        return float(low), "interval's lower end (faster)"
    if high < 1.0:
        return float(high), "interval's upper end (slower)"
    return 1.0, f"1: the interval [{low:.3g}, {high:.3g}] straddles 1x"


def check_credit(config: Mapping[str, Any]) -> str:
    credit = config["speedup_credit"]
    if credit not in ("interval", "point"):
        raise ValueError(f"speedup_credit: {credit!r} is not 'interval' (credit what the step's paired bursts show "
                         f"at least) or 'point' (the point estimate)")
    return credit


def performance_status(record: EvaluationRecord) -> tuple[str, str]:
    """Whether a correct answer's speed can be rewarded: ("measured" | "unavailable" | "suspect", why).

    Speed that was not measured (cpu / emulated executors), or whose timing the judge distrusts, earns
    nothing: rewarding it would reward noise, or the exploit that caused the suspicion.
    """
    if not record.performance_available:
        return "unavailable", f"not measured on {record.hardware!r}: {record.unmeasured}"
    if record.timing is not None and record.timing.suspect:
        return "suspect", f"timing suspect: {record.timing.suspect}"
    speedup = record.speedup
    if speedup is None:
        return "unavailable", "no speedup in the record (timing or reference time missing)"
    if isinstance(speedup, bool) or not math.isfinite(speedup) or speedup <= 0:
        return "suspect", f"speedup {speedup!r} is not a positive finite number"
    return "measured", ""
