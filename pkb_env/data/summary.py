"""What an episode dataset holds: counts per task and verdict, the best speedup per task, and the plot of
speedup against roofline fraction (the evaluation's picture, evaluation/plot.py, drawn from the rows)."""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pkb_env.record import EvaluationRecord, Verdict
from pkb_env.tables import table


@dataclass
class Point:
    """A row as the plot reads it (evaluation/plot.py, Plotted.rows)."""

    task: str
    correct: bool
    speedup: float | None
    roofline_fraction: float | None
    interval: tuple[float, float] | None = None   # the speedup's 90% interval, where the step's record has one


@dataclass
class DatasetView:
    """The dataset as evaluation/plot.py's `Plotted` (a report's rows, tasks and placement)."""

    rows: list[Point]
    task_names: list[str]
    agent: str
    executor: str
    world_size: int | None
    preset: str


def summary_tables(rows: Sequence[dict[str, Any]]) -> str:
    """Rows and steps, a table of verdict counts per task (steps: duplicates counted), and per task the
    best speedup and roofline fraction of a correct row."""
    verdicts = [v.value for v in reversed(Verdict)]  # correct first
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    counts: dict[str, Counter] = {t: Counter() for t in tasks}
    for r in rows:
        counts[r["task"]][r["verdict"]] += r["count"]
    shown = [v for v in verdicts if any(c[v] for c in counts.values())]
    verdict_table = table(["task", "steps", *shown], [[t, sum(counts[t].values()), *(counts[t][v] for v in shown)]
                                                      for t in tasks])
    best_rows = []
    for t in tasks:
        mine = [r for r in rows if r["task"] == t and r["correct"]]
        speedups = [r["speedup"] for r in mine if r["speedup"] is not None]
        fractions = [r["roofline_fraction"] for r in mine if r["roofline_fraction"] is not None]
        best_rows.append([t, len({r["code_hash"] for r in mine}), max(speedups) if speedups else None,
                          max(fractions) if fractions else None])
    best_table = table(["task", "correct codes", "best speedup", "best roofline"], best_rows)
    runs = len({r["run_id"] for r in rows})
    head = (f"{len(rows)} rows ({sum(r['count'] for r in rows)} judged steps) from {runs} run(s), "
            f"{len(tasks)} task(s); agents: {', '.join(sorted({r['agent'] or '?' for r in rows}))}")
    return f"{head}\n\nverdicts per task (judged steps)\n{verdict_table}\n\nbest correct per task\n{best_table}"


def plot(rows: Sequence[dict[str, Any]], path: str | os.PathLike, title: str) -> Path:
    """The speedup-vs-roofline PNG of the rows' correct steps (the `plot` extra: matplotlib)."""
    from pkb_env.evaluation.plot import speedup_vs_roofline

    view = DatasetView(rows=[Point(r["task"], r["correct"], r["speedup"], r["roofline_fraction"], _interval(r))
                             for r in rows],
                       task_names=list(dict.fromkeys(r["task"] for r in rows)), agent=title,
                       executor=_one(r["executor"] for r in rows), world_size=_one(r["world_size"] for r in rows),
                       preset=_one(r["preset"] for r in rows))
    if view.world_size == "mixed":
        view.world_size = None
    return speedup_vs_roofline(view, path)


def _interval(row: dict[str, Any]) -> tuple[float, float] | None:
    """The speedup's 90% interval, as the row's full record gives it (None where it has none)."""
    return EvaluationRecord.from_dict(json.loads(row["record"])).speedup_interval if row.get("record") else None


def _one(values) -> Any:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else "mixed"
