"""`Episode`: one task, turn by turn, by one set of rules for every door (docs/architecture.md, "The episode").

    episode = Episode(client, "all_reduce", max_turns=4)
    observation = episode.observation()             # turn 0 (the judge made ready for the task)
    turn = episode.step(completion)                 # judged: turn.reward, turn.terminated, turn.truncated, turn.info
    observation = episode.observation(turn.record.feedback)

The Gymnasium env, RayVectorEnv, the SkyRL and verifiers envs and the OpenEnv server's sessions keep their
episodes here, so that a turn is rewarded, credited and ended the same way whichever door a policy came in by:

* a turn's reward is the reward function's value of its record (`turn_reward`), or with `turn_credit
  "improvement"` only its gain over the best earlier turn (rewards/multiturn.py);
* terminated: a correct turn reached `target_speedup` (or was correct where speed is not measured): its speedup
  at least the target, and the lower end of its 90% interval from the step's paired bursts too where it has one
  (a speedup whose pairs straddle the target has not shown it reached it);
* truncated: `max_turns` turns were taken without that. A turn the judge could not judge (JUDGE_ERROR) counts
  as a turn, scores the reward's unjudged value, and is counted in `judge_errors`.

How a door waits for a turn is its own business (`step` blocks, `astep` awaits, `submit` + `take` let a vector
env judge many episodes' turns at once).
"""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pkb_env.client import Future, JudgeClient
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import RewardFunction, RewardResult, TurnCredit, improvement, load_reward
from pkb_env.spaces import MAX_SPEEDUP
from pkb_env.task import TaskError


@dataclass(frozen=True)
class Turn:
    """One judged turn: its record, its reward, and where the episode stands after it."""

    record: EvaluationRecord
    result: RewardResult     # the reward function's (every term in `info["reward_terms"]`)
    reward: float            # what the turn earns, turn credit applied
    terminated: bool
    truncated: bool
    info: dict[str, Any]     # step_info's keys, turn_reward and turn


class Episode:
    """One multi-turn episode on one task over a JudgeClient (the module docstring).

    `reward`: a reward config's name or YAML path, or a reward function. `where` names the settings in errors (the
    trainer's config key a user would fix). Settings and the task are checked here, before anything starts.
    """

    def __init__(self, client: JudgeClient, task: str, reward: str | RewardFunction = "default", max_turns: Any = 4,
                 target_speedup: Any = 1.0, turn_credit: str = "turn", preset: str | None = None,
                 dtype: str | None = None, where: str = "settings"):
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns ({where}) must be a positive integer, got {max_turns!r}")
        if isinstance(target_speedup, bool) or not isinstance(target_speedup, (int, float)) or \
                math.isnan(target_speedup):
            raise ValueError(f"{where}: target_speedup must be a number (1.0: as fast as the reference; inf: never "
                             f"ends before max_turns), got {target_speedup!r}")
        self.reward_fn = load_reward(reward) if isinstance(reward, str) else reward
        self.turn_credit = TurnCredit(turn_credit)
        self.client, self.preset, self.dtype = client, preset, dtype
        self.max_turns, self.target_speedup = max_turns, float(target_speedup)
        problem = client.problem(task, preset, dtype)   # TaskError naming the closest tasks
        if problem:
            raise TaskError(problem)
        self.task = task
        self.turns = 0
        self.best_reward: float | None = None
        self.best_speedup: float | None = None
        self.solved = False
        self.judge_errors = 0
        self.last: Turn | None = None

    # -- where it stands ---------------------------------------------------------------------------
    @property
    def over(self) -> bool:
        return self.solved or self.turns >= self.max_turns

    def check_open(self, after_solved: bool = False) -> None:
        """Raise, naming the fix, when no further turn belongs to this episode: after `max_turns` turns, and after
        it was solved unless `after_solved` (the Gymnasium env judges such a step, with a warning)."""
        if self.turns >= self.max_turns:
            raise RuntimeError(f"the episode is over ({self.max_turns} turns taken: truncated=True was returned, or "
                               f"done); start a new episode (reset)")
        if self.solved and not after_solved:
            raise RuntimeError("the episode is over (solved: terminated=True was returned, or done); start a new "
                               "episode (reset)")

    def observation(self, feedback: str = "") -> dict[str, Any]:
        """What the model is shown now (pkb_env/spaces.py's observation): turn 0 makes the judge ready for the
        task (its ranks started) before answering; later turns carry `feedback`."""
        observation = self.client.observation(self.task, self.preset, self.dtype, feedback, self.turns,
                                              ready=self.turns == 0)
        observation["best_speedup"] = np.array(min(self.best_speedup or 0.0, MAX_SPEEDUP), dtype=np.float32)
        return observation

    def next_message(self, record: EvaluationRecord) -> str:
        """The judge's feedback as the next turn's prompt words it, without the first prompt again (a chat keeps
        that in its history)."""
        first = self.client.observation(self.task, self.preset, self.dtype)["prompt"].rstrip("\n")
        after = self.client.observation(self.task, self.preset, self.dtype, record.feedback, self.turns)["prompt"]
        return after[len(first):].strip() if after.startswith(first) else after

    # -- turns ---------------------------------------------------------------------------------------
    def submit(self, code: str, after_solved: bool = False) -> Future:
        """Queue the next turn's code: a Future of its record, to be `take`n (in order) when it is done."""
        self.check_open(after_solved)
        return self.client.submit(self.task, code, self.preset, self.dtype)

    def step(self, code: str, after_solved: bool = False) -> Turn:
        """Judge the next turn and count it (blocks until the judge is done)."""
        return self.take(self.submit(code, after_solved).result())

    async def astep(self, code: str) -> Turn:
        """`step` for an event loop, which stays free while the judge works."""
        return self.take(await asyncio.wrap_future(self.submit(code)))

    def take(self, record: EvaluationRecord) -> Turn:
        """Count the judged turn of `record`: its reward, turn credit, and whether the episode is now over."""
        result = self.reward_fn(record)
        reward = result.value
        if self.turn_credit is TurnCredit.IMPROVEMENT:
            reward = improvement(result.value, self.best_reward)
        self.best_reward = result.value if self.best_reward is None else max(self.best_reward, result.value)
        self.turns += 1
        self.judge_errors += not record.judged
        if record.correct and record.speedup is not None:
            self.best_speedup = max(self.best_speedup or 0.0, record.speedup)
        terminated = record.correct and (not record.performance_available or reached(record, self.target_speedup))
        self.solved = self.solved or terminated
        truncated = not terminated and self.turns >= self.max_turns
        info = step_info(record, result)
        info["turn_reward"], info["turn"] = result.value, self.turns
        self.last = Turn(record, result, float(reward), bool(terminated), bool(truncated), info)
        return self.last

    def metrics(self) -> dict[str, Any]:
        """The episode in numbers, for trainers' logs."""
        return {"turns": self.turns, "solved": float(self.solved), "best_reward": self.best_reward or 0.0,
                "best_speedup": self.best_speedup, "judge_errors": self.judge_errors}


def task_pool(client: JudgeClient, task: str | Sequence[str] | None) -> list[str]:
    """The tasks a door draws its episodes from: a name, a list of names, or None for the whole suite as `client`
    runs it; each checked here (TaskError naming the fix: an unknown task, a size it cannot take)."""
    if task is None:
        names = client.tasks()
        if not names:
            config = client.config
            raise TaskError(f"no task of the suite runs at world size {config.world_size} with preset "
                            f"{config.preset!r} here; `pkb-env tasks` lists the world sizes and presets of each")
        return names
    names = [task] if isinstance(task, str) else list(task)
    if not names:
        raise TaskError("the task list is empty; pass a task name, a list of names, or None for all tasks")
    for name in names:
        problem = client.problem(name)   # TaskError naming the closest tasks
        if problem:
            raise TaskError(problem)
    return names


def reached(record: EvaluationRecord, target: float) -> bool:
    """The step's speedup reached `target`, its interval's lower end too where it has one (docs/timing.md)."""
    if record.speedup is None or record.speedup < target:
        return False
    interval = record.speedup_interval
    return interval is None or interval[0] >= target


def step_info(record: EvaluationRecord, result: RewardResult) -> dict[str, Any]:
    """The `info` of a step (ParallelKernelEnv.step documents each key), from its record and its reward."""
    return {
        "correct": record.correct,
        "verdict": record.verdict.value if record.verdict else None,
        "stage": record.stage.value,
        "error": record.error,
        "speedup": record.speedup,
        "speedup_interval": record.speedup_interval,
        "roofline_fraction": record.roofline_fraction,
        "reward_terms": dict(result.terms),
        "flags": [f"{f.code}: {f.message}" for f in record.flags],
        "stage_seconds": dict(record.stage_seconds),
        "feedback": record.feedback,
        "record": record,
    }
