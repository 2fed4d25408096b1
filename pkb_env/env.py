"""`ParallelKernelEnv`: one episode is one task; each step judges one candidate module.

The env is small on purpose: it keeps the episode (task, turn, best result, turn credit) and turns the
judge's EvaluationRecord into (observation, reward, terminated, truncated, info). The judging lives
behind its `JudgeService` (pkb_env/service.py), the reward in `pkb_env.rewards`.
"""
from __future__ import annotations

from typing import Any, Sequence

import gymnasium

from pkb_env import spaces as S
from pkb_env.config import JudgeConfig
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import RewardResult, TurnCredit, improvement, load_reward
from pkb_env.service import JudgeService, TaskSession
from pkb_env.task import TaskError, load_task


class ParallelKernelEnv(gymnasium.Env[dict, str]):
    """Write a faster multi-rank implementation of a PyTorch + torch.distributed reference.

    ## Observation (`Dict`)
    | key          | space                  | meaning                                                         |
    |--------------|------------------------|-----------------------------------------------------------------|
    | prompt       | Text(64k, printable)   | everything a model needs this turn, ready for a chat template    |
    | task_id      | Text(64)               | the task's name, e.g. "all_reduce"                               |
    | reference    | Text(200k)             | the reference module, verbatim                                   |
    | topology     | Text(8k)               | executor, world size, interconnect, bandwidths, engines          |
    | feedback     | Text(8k)               | the judge's report on the previous action ("" after reset)       |
    | turn         | Discrete(max_turns+1)  | actions taken so far in this episode                             |
    | world_size   | Discrete(4097)         | ranks the solution runs on                                       |
    | best_speedup | Box(0, 1e4, ())        | best measured speedup of a correct action this episode (0: none) |

    ## Action
    Text: a raw model completion (the last ```python block defining `solution` is used) or bare code.

    ## Reward
    From the reward function named by `reward` (configs/rewards/; default: shaped, in [-1, 1]) applied
    to the EvaluationRecord. `turn_credit="improvement"` pays only the gain over the best earlier turn.

    ## Episode end
    terminated: a correct action reached `target_speedup` (or was correct where speed is not measured): its
    speedup at least the target, and the lower end of its 90% interval from the step's paired bursts too
    where it has one (a speedup whose pairs straddle the target has not shown it reached it).
    truncated: `max_turns` actions were taken without that.
    After `terminated`, call `reset()`. A further `step()` is still judged (the record is real) but warns
    once per episode, as Gymnasium's own environments do: what it returns belongs to no episode. After
    `max_turns` actions `step()` raises until `reset()` (the observation's turn cannot go past max_turns).

    ## Arguments
    task: a task name, a list of names to draw from at reset, or None for the whole suite.
    config (JudgeConfig: every judge setting; default JudgeConfig()), and as shorthands that override it:
    world_size, executor ("auto" | "cpu" | "cuda" | "cuda-emulated"), preset ("tiny" | "bench" | "large"),
    dtype (None: the preset's). max_turns, target_speedup, reward (config name or YAML path),
    turn_credit ("turn" | "improvement"), render_mode (None | "ansi").

    The env's judge is `env.unwrapped.judge`, a JudgeService (its calibration, reference timings, isolation).

    .. versionchanged:: 0.2 `judge_settings` became `config` (a JudgeConfig holds every setting).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # fps: text frames, one per step

    def __init__(self, task: str | Sequence[str] | None = "all_reduce", world_size: int | None = None,
                 executor: str | None = None, preset: str | None = None, dtype: str | None = None, max_turns: int = 4,
                 target_speedup: float = 1.0, reward: str = "default", turn_credit: str = "turn",
                 config: JudgeConfig | None = None, render_mode: str | None = None):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'ansi'")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        shorthands = {"world_size": world_size, "executor": executor, "preset": preset, "dtype": dtype}
        config = (config or JudgeConfig()).replace(**{k: v for k, v in shorthands.items() if v is not None})
        self.max_turns, self.target_speedup = max_turns, target_speedup
        self.turn_credit = TurnCredit(turn_credit)
        self.reward_fn = load_reward(reward)
        self.render_mode = render_mode
        self.judge = JudgeService(config)
        try:
            self.task_pool = self._checked_pool(task)
        except Exception:
            self.judge.close()
            raise
        self.observation_space = S.observation_space(max_turns)
        self.action_space = S.action_space()
        self._session: TaskSession | None = None
        self._turn = 0
        self._best_reward: float | None = None
        self._best_speedup = 0.0
        self._last: dict[str, Any] = {}
        self._ended = False          # terminated: a further step() warns (once per episode)
        self._warned_after_end = False

    @property
    def world_size(self) -> int:
        return self.judge.world_size

    def _checked_pool(self, task: str | Sequence[str] | None) -> list[str]:
        """The tasks this env draws from, each able to run here. None: the whole suite as it runs here
        (JudgeService.tasks)."""
        if task is None:
            names = self.judge.tasks()
            if not names:
                raise TaskError(f"no task of the suite runs at world size {self.world_size} with preset "
                                f"{self.judge.config.preset!r} here; `pkb-env tasks` lists the world sizes and "
                                f"presets of each")
            return names
        names = [task] if isinstance(task, str) else list(task)
        if not names:
            raise TaskError("the task list is empty; pass a task name, a list of names, or None for all tasks")
        for name in names:
            problem = self.judge.problem(load_task(name))  # load_task raises with the list of known tasks
            if problem:
                raise TaskError(problem)
        return names

    # -- Gymnasium API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode. options: {"task": name} picks the task (else drawn from the pool)."""
        super().reset(seed=seed)
        options = dict(options or {})
        name = options.pop("task", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; the only option is 'task'")
        if name is None:
            name = self.task_pool[int(self.np_random.integers(len(self.task_pool)))]
        self._session = self.judge.open(name)  # TaskError naming the fix; starts the ranks for the first step
        self._turn, self._best_reward, self._best_speedup = 0, None, 0.0
        self._last = {}
        self._ended = self._warned_after_end = False
        return self._observation(""), {"task": name, "world_size": self.world_size, "executor": self.judge.info.name}

    def step(self, action: str):
        """Judge `action`. Returns (obs, reward, terminated, truncated, info).

        info keys:
          correct (bool), verdict (str), stage (str: last stage reached), error (str | None),
          speedup (float | None: reference time / candidate time; None if not measured or not trusted),
          speedup_interval ((low, high) | None: its 90% interval from the step's paired bursts),
          roofline_fraction (float | None: the cost model's bound / measured time; above 1 only if the
            model or the measurement is wrong, which the timing then reports as suspect),
          reward_terms (dict: every term of the reward), turn_reward (float: before turn credit),
          flags (list[str]: screen/runtime findings as "code: message"),
          stage_seconds (dict: wall time per stage), feedback (str), record (EvaluationRecord).
        """
        if self._session is None:
            raise RuntimeError("step() called before reset(); call env.reset() to start an episode")
        if self._turn >= self.max_turns:
            raise RuntimeError(f"the episode is over ({self.max_turns} actions taken, truncated=True was returned); "
                               f"call env.reset() to start the next one")
        if self._ended and not self._warned_after_end:
            self._warned_after_end = True
            gymnasium.logger.warn("You are calling 'step()' even though this episode already returned terminated=True. "
                                  "You should call 'reset()' once you receive 'terminated=True': this step is "
                                  "judged, but its reward and observation belong to no episode.")
        record = self._session.judge(action)
        result = self.reward_fn(record)
        reward = result.value
        if self.turn_credit is TurnCredit.IMPROVEMENT:
            reward = improvement(result.value, self._best_reward)
        self._best_reward = result.value if self._best_reward is None else max(self._best_reward, result.value)
        if record.speedup is not None and record.correct:
            self._best_speedup = max(self._best_speedup, record.speedup)
        self._turn += 1
        terminated = record.correct and (not record.performance_available or reached(record, self.target_speedup))
        truncated = not terminated and self._turn >= self.max_turns
        self._ended = self._ended or terminated
        info = step_info(record, result)
        info["turn_reward"] = result.value
        self._last = {"record": record, "reward": reward}
        return self._observation(record.feedback), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self._session is None:
            return "pkb-env: no episode (call reset)\n"
        head = (f"[{self._session.name} | world {self.world_size} | {self.judge.info.name} | "
                f"turn {self._turn}/{self.max_turns}]")
        record: EvaluationRecord | None = self._last.get("record")
        if record is None:
            return head + " waiting for the first action\n"
        return f"{head} verdict={record.verdict.value} reward={self._last['reward']:+.3f}\n{record.feedback}\n"

    def close(self) -> None:
        """Stop every rank process and remove the judge's files (JudgeService.close)."""
        self.judge.close()

    def _observation(self, feedback: str) -> dict[str, Any]:
        return S.observation(self._session, feedback, self._turn, self._best_speedup)


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
