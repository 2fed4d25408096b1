"""An evaluation's rows and the report made of them: per-task summaries, suite metrics, JSON and Markdown.

The metrics are computed on demand from the rows (evaluation/metrics.py); the roofline fraction is the
cost model's bound over the measured time, and the suite figure is its mean over correct samples that
have one.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from pkb_env.evaluation.metrics import fast_p, pass_at_k
from pkb_env.record import jsonable


@dataclass
class SampleResult:
    """One judged sample: the task, its index, and what the judge said about it."""

    task: str
    sample: int
    verdict: str | None
    correct: bool
    speedup: float | None = None
    roofline_fraction: float | None = None
    reward: float = 0.0
    speedup_low: float | None = None      # the lower end of the speedup's 90% interval (fast_p needs it above p)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    speedup_high: float | None = None     # its upper end (None where the step had too few pairs for an interval)

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.speedup_low is None or self.speedup_high is None else (self.speedup_low, self.speedup_high)


@dataclass
class TaskSummary:
    task: str
    n: int
    correct: int
    best_speedup: float | None          # over correct samples with a measured speedup
    best_interval: tuple[float, float] | None   # that sample's 90% interval (None: too few pairs for one)
    best_roofline_fraction: float | None  # over correct samples with a roofline fraction
    pass_at_k: dict[int, float]         # for each requested k <= n
    verdicts: dict[str, int]            # verdict -> count
    first_error: str | None = None


@dataclass
class EvaluationReport:
    """The rows of an evaluation and the metrics derived from them (computed on demand from `rows`)."""

    rows: list[SampleResult]
    ks: tuple[int, ...] = (1,)
    ps: tuple[float, ...] = (0, 1, 1.5, 2)
    agent: str = "?"
    executor: str = "?"
    world_size: int | None = None
    preset: str = "tiny"
    dtype: str | None = None
    hardware: str = "?"
    performance_available: bool = True
    date: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    wall_seconds: float | None = None

    # -- derived ---------------------------------------------------------------------------------
    @property
    def task_names(self) -> list[str]:
        return list(dict.fromkeys(r.task for r in self.rows))

    def task_summaries(self) -> list[TaskSummary]:
        out = []
        for name in self.task_names:
            rows = [r for r in self.rows if r.task == name]
            good = [r for r in rows if r.correct]
            timed = [r for r in good if r.speedup is not None and math.isfinite(r.speedup)]
            best = max(timed, key=lambda r: r.speedup, default=None)
            roofs = [r.roofline_fraction for r in good if r.roofline_fraction is not None]
            verdicts: dict[str, int] = {}
            for r in rows:
                verdicts[str(r.verdict)] = verdicts.get(str(r.verdict), 0) + 1
            n, c = len(rows), len(good)
            out.append(TaskSummary(
                task=name, n=n, correct=c, best_speedup=best.speedup if best else None,
                best_interval=best.interval if best else None, best_roofline_fraction=max(roofs) if roofs else None,
                pass_at_k={k: pass_at_k(n, c, k) for k in self.ks if k <= n}, verdicts=verdicts,
                first_error=next((r.error for r in rows if r.error), None)))
        return out

    def suite_metrics(self) -> dict[str, Any]:
        """pass@k (mean over tasks with n >= k), fast_p, mean roofline fraction of correct samples, counts."""
        summaries = self.task_summaries()
        metrics: dict[str, Any] = {"tasks": len(summaries), "samples": len(self.rows),
                                   "correct_samples": sum(s.correct for s in summaries)}
        for k in self.ks:
            values = [s.pass_at_k[k] for s in summaries if k in s.pass_at_k]
            metrics[f"pass@{k}"] = sum(values) / len(values) if values else None
        for p in self.ps:
            unmeasured = p > 0 and not self.performance_available
            metrics[f"fast_{p:g}"] = None if unmeasured else fast_p(self.rows, p)
        roofs = [r.roofline_fraction for r in self.rows if r.correct and r.roofline_fraction is not None]
        metrics["mean_roofline_fraction"] = sum(roofs) / len(roofs) if roofs else None
        return metrics

    # -- output ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "meta": {"agent": self.agent, "executor": self.executor, "world_size": self.world_size,
                     "preset": self.preset, "dtype": self.dtype, "hardware": self.hardware,
                     "performance_available": self.performance_available, "date": self.date,
                     "wall_seconds": self.wall_seconds, "ks": list(self.ks), "ps": list(self.ps)},
            "suite": self.suite_metrics(),
            "tasks": {s.task: {**asdict(s), "pass_at_k": {f"pass@{k}": v for k, v in s.pass_at_k.items()}}
                      for s in self.task_summaries()},
            "rows": [asdict(r) for r in self.rows],
        })

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_markdown(self) -> str:
        suite = self.suite_metrics()
        samples = sorted({s.n for s in self.task_summaries()})
        lines = [
            f"# pkb-env evaluation: {self.agent}",
            "",
            f"- executor: {self.executor}, world size {self.world_size}, preset {self.preset}, "
            f"dtype {self.dtype or 'preset default'}",
            f"- hardware: {self.hardware}",
            f"- date: {self.date}" + (f" (wall {self.wall_seconds:.1f} s)" if self.wall_seconds is not None else ""),
            f"- tasks: {suite['tasks']}, samples per task: {', '.join(map(str, samples)) or 0}",
        ]
        if not self.performance_available:
            lines.append(f"- executor {self.executor!r} does not measure performance: fast_p for p > 0 is n/a")
        lines += ["", "## Suite metrics", ""]
        names = {"tasks": "tasks", "samples": "samples", "correct_samples": "correct samples",
                 "mean_roofline_fraction": "mean roofline fraction (correct samples)"}
        described = {f"fast_{p:g}": (f"fast_{p:g} (tasks with a correct sample)" if p == 0 else
                                     f"fast_{p:g} (tasks with a correct sample whose speedup's 90% interval lies "
                                     f"above {p:g}x)") for p in self.ps}
        lines.append(_md_table(["metric", "value"],
                               [[names.get(k) or described.get(k) or k, _cell(v)] for k, v in suite.items()]))
        if any(p > 0 for p in self.ps):
            lines += ["", "fast_p (p > 0) counts a correct sample only when the lower end of its speedup's 90% "
                          "interval, from the step's paired bursts, is above p; a sample with too few pairs for an "
                          "interval (under 5) counts by its speedup alone."]
        lines += ["", "## Per task", ""]
        headers = ["task", "n", "correct", *(f"pass@{k}" for k in self.ks), "best speedup [90% interval]",
                   "best roofline", "verdicts", "first error"]
        rows = []
        for s in self.task_summaries():
            rows.append([s.task, s.n, s.correct, *(_cell(s.pass_at_k.get(k)) for k in self.ks),
                         _speedup(s.best_speedup, s.best_interval), _cell(s.best_roofline_fraction, "%"),
                         ", ".join(f"{v} {c}" for v, c in s.verdicts.items()), _short(s.first_error)])
        lines.append(_md_table(headers, rows))
        timed = [r for r in self.rows if r.speedup is not None]
        if timed:
            lines += ["", "## Timed samples", "",
                      "Each speedup is the step's paired estimate with its 90% interval over the paired bursts (none "
                      "where the step had fewer than 5 pairs); an interval that holds 1 does not tell the sample's "
                      "speed from the reference's.", ""]
            lines.append(_md_table(["task", "sample", "verdict", "speedup [90% interval]", "roofline", "reward"],
                                   [[r.task, r.sample, r.verdict, _speedup(r.speedup, r.interval),
                                     _cell(r.roofline_fraction, "%"), _cell(r.reward)] for r in timed]))
        return "\n".join(lines) + "\n"

    def plot(self, path: str | Path) -> Path:
        """A PNG scatter: speedup (x, log) against roofline fraction (y) of the correct samples, a colour per task."""
        from pkb_env.evaluation.plot import speedup_vs_roofline

        return speedup_vs_roofline(self, path)


# -- formatting ---------------------------------------------------------------------------------------
def _cell(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if unit == "%":
            return f"{value:.1%}"
        if unit == "x":
            return f"{value:.3g}x"
        return f"{value:.3f}"
    return str(value)


def _speedup(speedup: float | None, interval: tuple[float, float] | None) -> str:
    """'1.07x [0.93, 1.21]' (the 90% interval where there is one)."""
    if speedup is None:
        return "-"
    return _cell(speedup, "x") + (f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "")


def _short(text: Any, limit: int = 80) -> str:
    text = str(text or "").replace("\n", " ").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def esc(value: Any) -> str:
        return str(value if value not in (None, "") else "-").replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
