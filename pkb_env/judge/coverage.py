"""Which of a task's clauses (contract/clauses.py) the trials of a step reach, drawn as the judge draws them.

The judge's own plan (StepContext: the trial count raised for the edge cases, the trials a clause adds in
another dtype, the seeds chosen so that every edge case is among them) and the task's own input maker make
every rank's inputs in this process; each clause's predicate says whether a trial exercises it. Nothing is
judged and no rank is started: `tests/tasks/test_rule_coverage.py` asserts every clause in every step over a few
secrets, and `benchmarks/rule_coverage.py` counts over many for docs/rule_coverage.md.
"""
from __future__ import annotations

from dataclasses import replace

from pkb_env.config import JudgeConfig
from pkb_env.contract import Clause, Trial, rank_seeds
from pkb_env.contract.clauses import draw_trial
from pkb_env.contract.spec import TaskSpec
from pkb_env.judge.context import StepContext
from pkb_env.judge.seeds import SeedPlan


def step_trials(task: TaskSpec, preset: str, dtype: str, world_size: int, secret: int,
                trials: int = JudgeConfig().trials) -> list[Trial]:
    """The trials of one step whose secret is `secret`, every rank's inputs made as the ranks make them."""
    ctx = StepContext.make(task, preset, dtype, world_size, "cpu", trials, budget_s=0.0)
    ctx = replace(ctx, seeds=SeedPlan(ctx.seeds.layout, secret))
    seeds = ctx.trial_seeds()
    return [draw_trial(task, preset, d, world_size, [seeds[r][k] for r in range(world_size)])
            for k, d in enumerate(ctx.trial_dtypes)]


def timed_call(task: TaskSpec, preset: str, dtype: str, world_size: int, secret: int, index: int) -> Trial:
    """A call drawn as timed calls are (its seeds from the secret alone: one in two an edge case, any of them)."""
    layout = task.layout(world_size, task.preset(preset).dims)
    return draw_trial(task, preset, dtype, world_size,
                      [rank_seeds(secret, layout, r, "call", index) for r in range(world_size)])


def applicable(task: TaskSpec, preset: str, world_size: int) -> list[Clause]:
    """The task's clauses that can be reached at this size and world size (Clause.applies)."""
    sizes = task.env(task.preset(preset).dims, world_size)
    return [c for c in task.clauses if c.applies_at(sizes)]


def reached(clauses: list[Clause], trials: list[Trial]) -> dict[str, int]:
    """Per clause: how many of `trials` exercise it."""
    return {c.name: sum(bool(c.reached(t)) for t in trials) for c in clauses}
