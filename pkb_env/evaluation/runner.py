"""Suite evaluation: run an agent over tasks x samples on one JudgeService; report pass@k, fast_p, roofline.

    from pkb_env.evaluation import evaluate
    from pkb_env.agents import ReferenceAgent
    report = evaluate(ReferenceAgent(), tasks=["all_reduce", "broadcast"], config=JudgeConfig(world_size=2))
    print(report.to_markdown()); report.plot("speedup_vs_roofline.png")

Every sample is a fresh turn 0 of its task (the agent sees the observation of an opened task with no
feedback), so samples are independent draws from the agent, as pass@k assumes; the row's reward is the
one a single-turn episode of the env would return (metrics: evaluation/metrics.py).
"""
from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from pkb_env import spaces
from pkb_env.config import JudgeConfig
from pkb_env.errors import JudgeError
from pkb_env.evaluation.report import EvaluationReport, SampleResult
from pkb_env.record import EvaluationRecord
from pkb_env.task import TaskError, load_task, task_names


def evaluate(agent, tasks: Sequence[str] | None = None, config: JudgeConfig | None = None, samples: int = 1,
             ks: Sequence[int] = (1,), ps: Sequence[float] = (0, 1, 1.5, 2), progress: bool | None = None,
             reward: str = "default", pool=None, recorder=None) -> EvaluationReport:
    """Judge `samples` single-turn answers of `agent` on each task (None: the suite as it runs here) on one
    JudgeService made from `config`, or on a JudgePool (`pool`: every sample of the run submitted at once, the
    pool's config in force). `reward`: a configs/rewards/ name or a YAML path (each row's reward).
    `progress`: a bar on stderr (None: when stderr is a terminal). `recorder`: a pkb_env.data.EpisodeRecorder
    that gets every judged sample as it finishes (its chat, completion and reward: a dataset row each,
    docs/data.md)."""
    from pkb_env.agents import build_messages
    from pkb_env.rewards import load_reward

    names = list(dict.fromkeys(tasks)) if tasks is not None else None   # None: what runs here
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
    if pool is not None and config is not None:
        raise ValueError("pass either config or pool: a pool judges with its own config (pool.config)")
    reward_fn = load_reward(reward)
    config = pool.config if pool is not None else config or JudgeConfig()
    rows: list[SampleResult] = []

    def done(record: EvaluationRecord, sample: int, observation: dict, action: str, topology: str) -> None:
        result = reward_fn(record)
        rows.append(sample_row(record, sample, float(result.value)))
        if recorder is not None:
            recorder.record(record, action, build_messages(observation), config=config, topology=topology,
                            agent=getattr(agent, "name", None), reward=result.value, reward_terms=result.terms)

    start = time.perf_counter()
    # tqdm's own disable=None: off when stderr is not a terminal
    with tqdm(desc="evaluating", unit="sample", disable=None if progress is None else not progress) as bar:
        judge = _judge_here if pool is None else _judge_on_pool
        names, executor, hardware, performance = judge(agent, names, pool or config, samples, bar, done)
    rows.sort(key=lambda r: (names.index(r.task), r.sample))   # a pool's finish in any order
    return EvaluationReport(rows=rows, ks=ks, ps=ps, agent=getattr(agent, "name", type(agent).__name__),
                            executor=executor, world_size=config.world_size, preset=config.preset, dtype=config.dtype,
                            hardware=hardware, performance_available=performance,
                            wall_seconds=time.perf_counter() - start)


def _judge_here(agent, names: list[str] | None, config: JudgeConfig, samples: int, bar: tqdm, done):
    """Every sample judged in turn on one local JudgeService, each handed to `done` as it finishes; the tasks
    judged and the executor's facts."""
    from pkb_env.service import JudgeService

    with JudgeService(config) as judge:
        for name in names or ():
            problem = judge.problem(load_task(name))  # every task checked before the first is judged
            if problem:
                raise TaskError(problem)
        names = names or judge.tasks()
        bar.reset(total=len(names) * samples)
        for name in names:
            for i in range(samples):
                bar.set_description(f"{name} [{i + 1}/{samples}]")
                session = judge.open(name)
                observation = spaces.observation(session)
                action = agent.act(observation)
                try:
                    record = session.judge(action)
                except JudgeError as exc:  # many tasks in one run: say which one the judge failed on
                    raise JudgeError(f"task {name!r}, sample {i + 1}: {exc}") from exc
                done(record, i, observation, action, judge.info.topology)
                bar.update()
        info = judge.info
    return names, info.name, info.hardware, info.performance_available


def _judge_on_pool(agent, names: list[str] | None, pool, samples: int, bar: tqdm, done):
    """Every sample submitted to the pool at once (the agent answering each turn-0 observation as the pool's
    judges show it), each handed to `done` as it finishes."""
    config = pool.config
    if names is None:
        from pkb_env.task import runnable_tasks

        names = runnable_tasks(config.world_size, config.preset, config.dtype, config.executor != "cuda")
    observations = {name: pool.observation(name) for name in names}   # TaskError for a task that cannot run
    bar.reset(total=len(names) * samples)
    bar.set_description(f"judging on {pool.size} actor(s)")
    started = pool.started[0] if pool.started else {}
    submitted = {}
    for name in names:
        for i in range(samples):
            action = agent.act(observations[name])
            submitted[pool.submit(name, action)] = (i, observations[name], action)
    for future in concurrent.futures.as_completed(submitted):
        i, observation, action = submitted[future]
        done(future.result(), i, observation, action, started.get("topology", "unknown"))
        bar.update()
    return (names, started.get("executor", config.executor), started.get("hardware", "unknown"),
            started.get("performance_available", False))


def sample_row(record: EvaluationRecord, sample: int, reward: float) -> SampleResult:
    """A report's row: correct per the judge and free of exploit flags (an exploit that passed verification
    is no answer)."""
    return SampleResult(task=record.task, sample=sample, verdict=record.verdict.value if record.verdict else None,
                        correct=record.correct and not record.exploit_flags, speedup=record.speedup,
                        roofline_fraction=record.roofline_fraction, reward=reward,
                        stage_seconds=dict(record.stage_seconds), error=record.error,
                        speedup_low=record.speedup_interval[0] if record.speedup_interval else None)


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
    """`a,b` -> [a, b] (checked: a task that cannot run here is refused, naming the sizes it takes); None/"all"
    -> None, the whole suite as it runs here (the judge's `tasks()`: at world size 1 the tasks that take it),
    or for a by-task FileAgent the tasks it has files for."""
    from pkb_env.agents import FileAgent

    by_task = isinstance(agent, FileAgent) and agent.by_task
    if spec is None or spec.strip() in ("", "all"):
        if not by_task:
            return None
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
