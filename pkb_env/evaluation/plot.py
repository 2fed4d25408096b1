"""The evaluation's picture: speedup (log x) against roofline fraction (y) of the correct samples, a colour per task.

Both axes fit the data (fractions of a few percent on a 0-1 axis were a line along the bottom), and each speedup
carries its 90% interval from the step's paired bursts as a horizontal bar: a point whose bar crosses 1x is not
shown to be faster or slower than the reference. The roofline fraction has no interval of its own (it is the
bound over the candidate's time per call), so it has no bar."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol, Sequence

from pkb_env.extras import require


class Plotted(Protocol):
    """What the plot reads of a report (evaluation/report.py, EvaluationReport)."""

    rows: Sequence[Any]          # SampleResults: task, correct, speedup, its interval, roofline_fraction
    task_names: list[str]
    agent: str
    executor: str
    world_size: int | None
    preset: str


def speedup_vs_roofline(report: Plotted, path: str | Path) -> Path:
    """Write the PNG to `path` (matplotlib, the `plot` extra) and return its path."""
    path = Path(path)
    fig = figure(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def figure(report: Plotted):
    """The plot as a matplotlib Figure (Agg, pyplot's global state untouched)."""
    require("matplotlib", "plot", "the speedup-vs-roofline plot")  # not a dependency of the env itself
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig = Figure(figsize=(9.0, 5.0), dpi=120)
    FigureCanvasAgg(fig)  # the Agg backend, without touching pyplot's global state
    ax = fig.add_subplot()
    points = [r for r in report.rows if r.correct and r.speedup is not None and r.roofline_fraction is not None
              and math.isfinite(r.speedup) and r.speedup > 0]
    names = report.task_names
    colours = _colours(len(names))
    for name, colour in zip(names, colours):
        mine = [r for r in points if r.task == name]
        if mine:
            ax.scatter([r.speedup for r in mine], [r.roofline_fraction for r in mine], color=colour, label=name,
                       s=36, alpha=0.85, edgecolors="black", linewidths=0.4, zorder=3)
            barred = [r for r in mine if r.interval is not None]
            if barred:
                ax.errorbar([r.speedup for r in barred], [r.roofline_fraction for r in barred],
                            xerr=[[r.speedup - r.interval[0] for r in barred], [r.interval[1] - r.speedup for r in barred]],
                            fmt="none", ecolor=colour, elinewidth=1.2, capsize=3, alpha=0.85, zorder=2)
    ax.set_xscale("log")
    if points:
        xs = [x for r in points for x in (r.speedup, *(r.interval or ()))]
        lo, hi = min(min(xs), 1.0) / 1.3, max(max(xs), 1.0) * 1.3
    else:
        lo, hi = 0.1, 10.0
    ax.set_xlim(lo, hi)
    # within about a decade label every 1..9 step, else 1, 2, 5 per decade
    subs = (1.0, 1.5, *(float(i) for i in range(2, 10))) if hi / lo <= 12 else (1.0, 2.0, 5.0)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if not points:
        correct = sum(r.correct for r in report.rows)
        note = ("no correct samples" if not correct else
                f"{correct} correct sample(s), none with a measured speedup and roofline fraction")
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=11,
                bbox={"boxstyle": "round", "facecolor": "whitesmoke", "edgecolor": "grey"})
    top = max((r.roofline_fraction for r in points), default=1.0)
    ax.set_ylim(0, min(1.05, top * 1.25) if top > 0 else 1.05)   # fitted: above 1 the model or the timing is wrong
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}" if v < 0.1 else f"{v:.2f}"))
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1, label="speedup 1 (reference)")
    if any(r.interval is not None for r in points):
        ax.plot([], [], color="grey", linewidth=1.2, label="bars: the speedup's 90% interval")
    ax.set_xlabel("speedup over the reference (log scale)")
    ax.set_ylabel("roofline fraction (alpha-beta bound / measured time)")
    where = ", ".join(x for x in (report.executor if report.executor != "?" else "",
                                  f"world size {report.world_size}" if report.world_size else "",
                                  f"preset {report.preset}") if x)
    ax.set_title(f"{report.agent}: speedup vs roofline of {len(points)} correct sample(s) ({where})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def _colours(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
