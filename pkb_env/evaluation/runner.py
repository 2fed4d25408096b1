"""Suite evaluation: run an agent over tasks x samples on one judge client; report pass@k, fast_p, roofline.

    from pkb_env.evaluation import evaluate
    from pkb_env.agents import ReferenceAgent
    report = evaluate(ReferenceAgent(), tasks=["all_reduce", "broadcast"], config=JudgeConfig(world_size=2))
    print(report.to_markdown()); report.plot("speedup_vs_roofline.png")

Every sample is a fresh turn 0 of its task (the agent sees the observation of its task with no feedback), so
samples are independent draws from the agent, as pass@k assumes; the row's reward is the one a single-turn
episode of the env would return (metrics: evaluation/metrics.py). Every sample is submitted at once to the client
(pkb_env/client.py): a local judge takes them in turn, a JudgePool in parallel on its actors. A sample the judge
could not judge (judge_error: never the agent's fault) is a row that is not correct, with the reason in `error`.
"""
from __future__ import annotations

import concurrent.futures
import time
from typing import Iterator, Sequence

from tqdm import tqdm

from pkb_env.client import JudgeClient, LocalClient
from pkb_env.config import JudgeConfig
from pkb_env.evaluation.report import EvaluationReport, SampleResult
from pkb_env.record import EvaluationRecord
from pkb_env.task import TaskError, load_task, task_names


def evaluate(agent, tasks: Sequence[str] | None = None, config: JudgeConfig | None = None, samples: int = 1,
             ks: Sequence[int] = (1,), ps: Sequence[float] = (0, 1, 1.5, 2), progress: bool | None = None,
             reward: str = "default", client: JudgeClient | None = None, recorder=None) -> EvaluationReport:
    """Judge `samples` single-turn answers of `agent` on each task (None: the suite as it runs here) on `client` (a
    LocalClient or a JudgePool: the caller's, its config in force), or on a LocalClient made from `config` for the
    run. `reward`: a configs/rewards/ name or a YAML path (each row's reward). `progress`: a bar on stderr (None:
    when stderr is a terminal). `recorder`: a pkb_env.data.EpisodeRecorder that gets every judged sample as it
    finishes (its chat, completion and reward: a dataset row each, docs/data.md).

    .. versionchanged:: 0.3 `pool=` became `client=` (a JudgePool is a client); a judge failure is a row, not an
       exception."""
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
    if client is not None and config is not None:
        raise ValueError("pass either config or client: a client judges with its own config (client.config)")
    reward_fn = load_reward(reward)
    own = client is None
    client = LocalClient(config or JudgeConfig()) if own else client
    start = time.perf_counter()
    try:
        for name in names or ():
            problem = client.problem(name)   # every task checked before the first is judged
            if problem:
                raise TaskError(problem)
        names = names or client.tasks()
        observations = {name: client.observation(name, ready=True) for name in names}
        info = client.info
        rows: list[SampleResult] = []
        # tqdm's own disable=None: off when stderr is not a terminal
        with tqdm(total=len(names) * samples, desc="evaluating", unit="sample",
                  disable=None if progress is None else not progress) as bar:
            submitted = {}
            if getattr(client.config, "verify_lanes", 0) and hasattr(client, "submit_many"):
                # one batch on the client's verdicts-only lanes (pkb_env/lanes.py): every completion first
                jobs = list(completions(agent, names, observations, samples))
                futures = client.submit_many([(name, action) for name, _, action in jobs])
                submitted = {f: (i, observations[name], action) for f, (name, i, action) in zip(futures, jobs)}
            else:   # each completion judged as soon as it is written
                for name, i, action in completions(agent, names, observations, samples):
                    bar.set_description(f"{name} [{i + 1}/{samples}]")
                    submitted[client.submit(name, action)] = (i, observations[name], action)
            bar.set_description("judging")
            for future in concurrent.futures.as_completed(submitted):
                i, observation, action = submitted[future]
                record = future.result()
                result = reward_fn(record)
                rows.append(sample_row(record, i, float(result.value)))
                if recorder is not None and record.judged:
                    recorder.record(record, action, build_messages(observation), config=client.config,
                                    topology=info.topology, agent=getattr(agent, "name", None),
                                    reward=result.value, reward_terms=result.terms)
                bar.update()
    finally:
        if own:
            client.close()
    rows.sort(key=lambda r: (names.index(r.task), r.sample))   # judged in any order
    config = client.config
    return EvaluationReport(rows=rows, ks=ks, ps=ps, agent=getattr(agent, "name", type(agent).__name__),
                            executor=info.name, world_size=config.world_size, preset=config.preset, dtype=config.dtype,
                            hardware=info.hardware, performance_available=info.performance_available,
                            wall_seconds=time.perf_counter() - start)


def completions(agent, names: Sequence[str], observations: dict, samples: int) -> Iterator[tuple[str, int, str]]:
    """(task, sample, completion) for `samples` completions of each task, in the order they are ready.

    An agent with `act_batch` (the model agents) is asked for a task's samples at once (one request with n samples
    for a server, one batch for a local model), `agent.concurrency` tasks at a time (a server's requests in flight;
    1 where the agent has none). A model that generates on this machine (`agent.runs_here`) finishes every
    completion before the first is judged: its generation beside the rank processes would be timed with them.
    Others are judged as their completions come (judging overlaps the server's generation)."""
    if not hasattr(agent, "act_batch"):
        for name in names:
            for i in range(samples):
                yield name, i, agent.act(observations[name])
        return

    def task(name: str) -> list[tuple[str, int, str]]:
        texts = agent.act_batch([observations[name]], num_samples=samples)[0]
        return [(name, i, text) for i, text in enumerate(texts)]

    here = getattr(agent, "runs_here", False)
    workers = min(max(1, int(getattr(agent, "concurrency", 1) or 1)), len(names))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(task, name) for name in names]
        if here:
            concurrent.futures.wait(futures)   # every completion made before the first step starts
        for future in futures if here else concurrent.futures.as_completed(futures):
            yield from future.result()


def sample_row(record: EvaluationRecord, sample: int, reward: float) -> SampleResult:
    """A report's row: correct per the judge and free of exploit flags (an exploit that passed verification
    is no answer)."""
    return SampleResult(task=record.task, sample=sample, verdict=record.verdict.value if record.verdict else None,
                        correct=record.correct and not record.exploit_flags, speedup=record.speedup,
                        roofline_fraction=record.roofline_fraction, reward=reward,
                        stage_seconds=dict(record.stage_seconds), error=record.error,
                        speedup_low=record.speedup_interval[0] if record.speedup_interval else None,
                        speedup_high=record.speedup_interval[1] if record.speedup_interval else None)


# -- tasks from CLI-style specs (agents: pkb_env/agents/specs.py) ------------------------------------------
def resolve_tasks(spec: str | None, agent=None) -> list[str] | None:
    """`a,b` -> [a, b] (checked: a task that cannot run here is refused, naming the sizes it takes); None/"all"
    -> None, the whole suite as it runs here (the judge's `tasks()`: at world size 1 the tasks that take it),
    or for a by-task FileAgent the tasks it has files for."""
    from pkb_env.agents import FileAgent

    by_task = isinstance(agent, FileAgent) and agent.by_task
    if spec is None or spec.strip() in ("", "all"):
        if not by_task:
            return None
        names = [n for n in task_names() if agent.has(n)]
        if not names:
            raise ValueError(f"none of the {len(agent.files)} .py files of {agent.name} is named after a task; "
                             f"name them <task>.py (`pkb-env tasks` lists the task names)")
        return names
    names = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    for name in names:
        load_task(name)  # TaskError naming the closest tasks
    if by_task:
        missing = [n for n in names if not agent.has(n)]
        if missing:
            raise ValueError(f"{agent.name} has no file for task(s) {', '.join(missing)}; add "
                             f"{', '.join(m + '.py' for m in missing)} or leave them out of --tasks")
    return names
