"""Suite evaluation: run an agent over tasks x samples, report pass@k, fast_p and roofline fractions.

    from pkb_env.evaluate import evaluate
    from pkb_env.agents import ReferenceAgent
    report = evaluate(ReferenceAgent(), tasks=["all_reduce", "broadcast"], world_size=2, executor="cpu")
    print(report.to_markdown()); report.plot("speedup_vs_roofline.png")

Every sample is a fresh turn 0 of its task (the env is reset before each one), so samples are
independent draws from the agent, as pass@k assumes. The metrics follow KernelBench / ParallelKernelBench:

- pass@k: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k), for a task with n
  samples of which c are correct; the suite value is its mean over tasks.
- fast_p: the fraction of tasks with at least one sample that is correct and has speedup > p (strictly).
  fast_0 is the fraction of tasks with a correct sample (timed or not), as KernelBench defines it. Where
  the executor does not measure performance at all, fast_p for p > 0 is None (not 0): nothing was timed.
- roofline fraction: the alpha-beta bound over the measured time, in [0, 1]; the suite figure is the mean
  over correct samples that have one.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from tqdm import tqdm

from pkb_env.extras import require
from pkb_env.record import jsonable
from pkb_env.task import TaskError, load_task, task_names

__all__ = ["SampleResult", "TaskSummary", "EvaluationReport", "evaluate", "pass_at_k", "fast_p", "agent_from_spec",
           "resolve_tasks"]


# -- metrics -----------------------------------------------------------------------------------------
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


def _fast(row: "SampleResult", p: float) -> bool:
    if not row.correct:
        return False
    if p == 0:
        return True  # KernelBench's fast_0: correctness alone
    return row.speedup is not None and math.isfinite(row.speedup) and row.speedup > p


def fast_p(rows: Iterable["SampleResult"], p: float) -> float | None:
    """Fraction of the tasks in `rows` with ANY sample that is correct and has speedup > p (p = 0: correct)."""
    if p < 0:
        raise ValueError(f"fast_p: p must be >= 0, got {p}")
    hits: dict[str, bool] = {}
    for row in rows:
        hits[row.task] = hits.get(row.task, False) or _fast(row, p)
    if not hits:
        return None
    return sum(hits.values()) / len(hits)


# -- records -----------------------------------------------------------------------------------------
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
    stage_seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass
class TaskSummary:
    task: str
    n: int
    correct: int
    best_speedup: float | None          # over correct samples with a measured speedup
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
            speedups = [r.speedup for r in good if r.speedup is not None and math.isfinite(r.speedup)]
            roofs = [r.roofline_fraction for r in good if r.roofline_fraction is not None]
            verdicts: dict[str, int] = {}
            for r in rows:
                verdicts[str(r.verdict)] = verdicts.get(str(r.verdict), 0) + 1
            n, c = len(rows), len(good)
            out.append(TaskSummary(
                task=name, n=n, correct=c, best_speedup=max(speedups) if speedups else None,
                best_roofline_fraction=max(roofs) if roofs else None,
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
                                     f"fast_{p:g} (tasks with a correct sample, speedup > {p:g})") for p in self.ps}
        lines.append(_md_table(["metric", "value"],
                               [[names.get(k) or described.get(k) or k, _cell(v)] for k, v in suite.items()]))
        lines += ["", "## Per task", ""]
        headers = ["task", "n", "correct", *(f"pass@{k}" for k in self.ks), "best speedup", "best roofline",
                   "verdicts", "first error"]
        rows = []
        for s in self.task_summaries():
            rows.append([s.task, s.n, s.correct, *(_cell(s.pass_at_k.get(k)) for k in self.ks),
                         _cell(s.best_speedup, "x"), _cell(s.best_roofline_fraction, "%"),
                         ", ".join(f"{v} {c}" for v, c in s.verdicts.items()), _short(s.first_error)])
        lines.append(_md_table(headers, rows))
        return "\n".join(lines) + "\n"

    def plot(self, path: str | Path) -> Path:
        """A PNG scatter: speedup (x, log) against roofline fraction (y) of the correct samples, a colour per task."""
        require("matplotlib", "plot", "the speedup-vs-roofline plot")  # not a dependency of the env itself
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
        path = Path(path)
        fig = Figure(figsize=(9.0, 5.0), dpi=120)
        FigureCanvasAgg(fig)  # the Agg backend, without touching pyplot's global state
        ax = fig.add_subplot()
        points = [r for r in self.rows if r.correct and r.speedup is not None and r.roofline_fraction is not None
                  and math.isfinite(r.speedup) and r.speedup > 0]
        names = self.task_names
        colours = _colours(len(names))
        for name, colour in zip(names, colours):
            mine = [r for r in points if r.task == name]
            if mine:
                ax.scatter([r.speedup for r in mine], [r.roofline_fraction for r in mine], color=colour, label=name,
                           s=36, alpha=0.85, edgecolors="black", linewidths=0.4)
        ax.set_xscale("log")
        if points:
            xs = [r.speedup for r in points]
            lo, hi = min(min(xs), 1.0) / 1.5, max(max(xs), 1.0) * 1.5
        else:
            lo, hi = 0.1, 10.0
        ax.set_xlim(lo, hi)
        # within about a decade label every 1..9 step, else 1, 2, 5 per decade
        subs = (1.0, 1.5, *(float(i) for i in range(2, 10))) if hi / lo <= 12 else (1.0, 2.0, 5.0)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        if not points:
            correct = sum(r.correct for r in self.rows)
            note = ("no correct samples" if not correct else
                    f"{correct} correct sample(s), none with a measured speedup and roofline fraction")
            ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=11,
                    bbox={"boxstyle": "round", "facecolor": "whitesmoke", "edgecolor": "grey"})
        ax.set_ylim(0, 1.05)
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=1, label="speedup 1 (reference)")
        ax.set_xlabel("speedup over the reference (log scale)")
        ax.set_ylabel("roofline fraction (alpha-beta bound / measured time)")
        where = ", ".join(x for x in (self.executor if self.executor != "?" else "",
                                      f"world size {self.world_size}" if self.world_size else "",
                                      f"preset {self.preset}") if x)
        ax.set_title(f"{self.agent}: speedup vs roofline of {len(points)} correct sample(s) ({where})", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
        return path


# -- running -----------------------------------------------------------------------------------------
def evaluate(agent, tasks: Sequence[str] | None = None, world_size: int = 4, executor: str = "auto",
             preset: str = "tiny", dtype: str | None = None, samples: int = 1, ks: Sequence[int] = (1,),
             ps: Sequence[float] = (0, 1, 1.5, 2), judge_settings=None, progress: bool = True,
             reward: str = "default") -> EvaluationReport:
    """Judge `samples` single-turn answers of `agent` on each task in one env; see the module docstring.

    `reward` is the env's reward setting (a configs/rewards/ name or a YAML path): it sets each row's reward."""
    import time

    import gymnasium

    import pkb_env  # noqa: F401  (registers the env)

    names = list(dict.fromkeys(tasks)) if tasks is not None else None   # None: the env picks what runs here
    if names == []:
        raise TaskError("no tasks to evaluate; pass task names, or None for the whole suite")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be a positive integer, got {samples!r}")
    ks = tuple(ks)
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, int) or k < 1]
    if bad or not ks:
        raise ValueError(f"ks must be positive integers, got {list(ks)!r}")
    if max(ks) > samples:
        raise ValueError(f"pass@{max(ks)} needs at least {max(ks)} samples per task; raise samples (--samples) to "
                         f"{max(ks)} or drop k={max(ks)} from ks (--k)")
    ps = tuple(ps)
    if any(isinstance(p, bool) or not isinstance(p, (int, float)) or not p >= 0 for p in ps):
        raise ValueError(f"ps must be numbers >= 0, got {list(ps)!r}")

    start = time.perf_counter()
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task=names, world_size=world_size, executor=executor,
                         preset=preset, dtype=dtype, max_turns=1, judge_settings=judge_settings, reward=reward)
    names = env.unwrapped.task_pool
    rows: list[SampleResult] = []
    try:
        info = env.unwrapped.executor.info
        with tqdm(total=len(names) * samples, desc="evaluating", unit="sample", disable=not progress) as bar:
            for name in names:
                for i in range(samples):
                    bar.set_description(f"{name} [{i + 1}/{samples}]")
                    obs, _ = env.reset(options={"task": name})
                    _, value, _, _, step = env.step(agent.act(obs))
                    rows.append(SampleResult(
                        task=name, sample=i, verdict=step["verdict"], correct=_counts_as_correct(step),
                        speedup=step["speedup"], roofline_fraction=step["roofline_fraction"], reward=float(value),
                        stage_seconds=dict(step["stage_seconds"]), error=step["error"]))
                    bar.update()
    finally:
        env.close()
    return EvaluationReport(rows=rows, ks=ks, ps=ps, agent=getattr(agent, "name", type(agent).__name__),
                            executor=info.name, world_size=world_size, preset=preset, dtype=dtype,
                            hardware=info.hardware, performance_available=info.performance_available,
                            wall_seconds=time.perf_counter() - start)


def _counts_as_correct(step: dict[str, Any]) -> bool:
    """Correct per the judge and free of exploit flags (an exploit that passed verification is no answer)."""
    record = step.get("record")
    if record is not None and record.exploit_flags:
        return False
    return bool(step["correct"])


# -- agents and tasks from CLI-style specs ---------------------------------------------------------------
def agent_from_spec(spec: str):
    """`reference` -> ReferenceAgent; `files:DIR` -> FileAgent over DIR's `<task>.py` files (by task)."""
    from pkb_env.agents import FileAgent, ReferenceAgent

    if spec == "reference":
        return ReferenceAgent()
    if spec.startswith("files:"):
        if not spec[len("files:"):].strip():
            raise ValueError("--agent files: needs a folder, e.g. --agent files:my_solutions/ (one <task>.py per task)")
        folder = Path(spec[len("files:"):].strip()).expanduser()
        if not folder.exists():
            raise FileNotFoundError(f"no such folder: {folder}; --agent files:DIR needs a folder of <task>.py files")
        if folder.is_file():
            raise ValueError(f"--agent files:{folder} is a file; pass a folder holding one <task>.py per task "
                             f"(to judge a single file use `pkb-env eval TASK {folder}`)")
        agent = FileAgent(folder, by_task=True)  # FileNotFoundError names the missing folder
        agent.name = f"files:{folder}"
        return agent
    raise ValueError(f"unknown agent {spec!r}; use --agent reference or --agent files:DIR "
                     f"(a folder with one <task>.py per task)")


def resolve_tasks(spec: str | None, agent=None) -> list[str] | None:
    """`a,b` -> [a, b] (checked); None/"all" -> the whole suite, or for a by-task FileAgent the tasks it has files for."""
    from pkb_env.agents import FileAgent

    by_task = isinstance(agent, FileAgent) and agent.by_task
    if spec is None or spec.strip() in ("", "all"):
        if not by_task:
            return list(task_names())
        names = [n for n in task_names() if any(f.stem == n for f in agent.files)]
        if not names:
            raise ValueError(f"none of the {len(agent.files)} .py files of {agent.name} is named after a task; "
                             f"name them <task>.py, one of: {', '.join(task_names())}")
        return names
    names = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    for name in names:
        load_task(name)  # TaskError lists the known tasks
    if by_task:
        missing = [n for n in names if not any(f.stem == n for f in agent.files)]
        if missing:
            raise ValueError(f"{agent.name} has no file for task(s) {', '.join(missing)}; add "
                             f"{', '.join(m + '.py' for m in missing)} or leave them out of --tasks")
    return names


# -- formatting ----------------------------------------------------------------------------------------
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


def _short(text: Any, limit: int = 80) -> str:
    text = str(text or "").replace("\n", " ").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def esc(value: Any) -> str:
        return str(value if value not in (None, "") else "-").replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _colours(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]

