"""`ParallelKernelEnv`: one episode is one task; each step judges one candidate module.

The env is small on purpose: it keeps the episode (task, turn, best result) and turns the judge's
EvaluationRecord into (observation, reward, terminated, truncated, info). The judging lives in
`pkb_env.judge`, the processes in `pkb_env.executors`, the reward in `pkb_env.rewards`.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Sequence

import gymnasium
import numpy as np

from pkb_env import spaces as S
from pkb_env.executors import make_executor
from pkb_env.judge.pipeline import Judge, JudgeSettings
from pkb_env.prompt import build_prompt
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import TurnCredit, improvement, load_reward
from pkb_env.task import TaskError, TaskSpec, load_task, runnable_tasks
from pkb_env.topology import load_calibration


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
    terminated: a correct action reached `target_speedup` (or was correct where speed is not measured).
    truncated: `max_turns` actions were taken without that.
    After `terminated`, call `reset()`. A further `step()` is still judged (the record is real) but warns
    once per episode, as Gymnasium's own environments do: what it returns belongs to no episode. After
    `max_turns` actions `step()` raises until `reset()` (the observation's turn cannot go past max_turns).

    ## Arguments
    task: a task name, a list of names to draw from at reset, or None for the whole suite.
    world_size, executor ("auto" | "cpu" | "cuda" | "cuda-emulated"), preset ("tiny" | "bench" | "large"),
    dtype (None: the preset's), max_turns, target_speedup, reward (config name or YAML path),
    turn_credit ("turn" | "improvement"), judge_settings (JudgeSettings), render_mode (None | "ansi").
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # fps: text frames, one per step

    def __init__(self, task: str | Sequence[str] | None = "all_reduce", world_size: int = 4, executor: str = "auto",
                 preset: str = "tiny", dtype: str | None = None, max_turns: int = 4, target_speedup: float = 1.0,
                 reward: str = "default", turn_credit: str = "turn", judge_settings: JudgeSettings | None = None,
                 render_mode: str | None = None):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'ansi'")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        self.world_size, self.preset, self.dtype = world_size, preset, dtype
        self.max_turns, self.target_speedup = max_turns, target_speedup
        self.turn_credit = TurnCredit(turn_credit)
        self.reward_fn = load_reward(reward)
        self.render_mode = render_mode
        self.executor = make_executor(executor, world_size)
        try:
            self.task_pool = self._checked_pool(task)
        except Exception:
            self.executor.close()
            raise
        self.judge = Judge(self.executor, judge_settings)
        self.observation_space = S.observation_space(max_turns)
        self.action_space = S.action_space()
        self._task: TaskSpec | None = None
        self._turn = 0
        self._best_reward: float | None = None
        self._best_speedup = 0.0
        self._last: dict[str, Any] = {}
        self._ended = False          # terminated: a further step() warns (once per episode)
        self._warned_after_end = False

    def _checked_pool(self, task: str | Sequence[str] | None) -> list[str]:
        """The tasks this env draws from, each able to run here. None: the whole suite, i.e. every task that
        takes this world size and preset (and, where the trusted reference runs on CPU ranks, whose reference
        they can run at that size)."""
        if task is None:
            names = [n for n in runnable_tasks(self.world_size, self.preset)
                     if (self.dtype is None or self.dtype in load_task(n).dtypes)
                     and self._size_problem(load_task(n)) is None]
            if not names:
                raise TaskError(f"no task of the suite runs at world size {self.world_size} with preset "
                                f"{self.preset!r} here; `pkb-env tasks` lists the world sizes and presets of each")
            return names
        names = [task] if isinstance(task, str) else list(task)
        if not names:
            raise TaskError("the task list is empty; pass a task name, a list of names, or None for all tasks")
        for name in names:
            self._check_task(load_task(name))  # load_task raises with the list of known tasks
        return names

    def _check_task(self, task: TaskSpec) -> None:
        task.check_world_size(self.world_size, self.preset)
        problem = self._size_problem(task)
        if problem:
            raise TaskError(problem)

    def _size_problem(self, task: TaskSpec) -> str | None:
        """Why `task` cannot be judged here at this size and dtype (outputs over what the judge takes from a
        call; a reference beyond the CPU ranks that run it under cpu and cuda-emulated), or None."""
        dtype = task.resolve_dtype(self.preset, self.dtype)
        on_cpu = all(device == "cpu" for device in self.executor.reference_placement.devices)
        return task.output_problem(self.world_size, self.preset, dtype) or \
            (task.cpu_reference_problem(self.world_size, self.preset, dtype) if on_cpu else None)

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
        task = load_task(name)
        self._check_task(task)
        self._dtype = task.resolve_dtype(self.preset, self.dtype)
        self._task, self._turn, self._best_reward, self._best_speedup = task, 0, None, 0.0
        self._last = {}
        self._ended = self._warned_after_end = False
        info = self.executor.info
        calibration = load_calibration(info.hardware, self.world_size, self.judge.protocol.statistic)
        self._topology_text = self.judge.topology.describe(self.world_size, info.name, calibration)
        self._peaks = self.judge.peaks(calibration)
        self.executor.prestart()
        return self._observation(""), {"task": task.name, "world_size": self.world_size,
                                       "executor": self.executor.info.name}

    def step(self, action: str):
        """Judge `action`. Returns (obs, reward, terminated, truncated, info).

        info keys:
          correct (bool), verdict (str), stage (str: last stage reached), error (str | None),
          speedup (float | None: reference time / candidate time; None if not measured or not trusted),
          roofline_fraction (float | None: the cost model's bound / measured time; above 1 only if the
            model or the measurement is wrong, which the timing then reports as suspect),
          reward_terms (dict: every term of the reward), turn_reward (float: before turn credit),
          flags (list[str]: screen/runtime findings as "code: message"),
          stage_seconds (dict: wall time per stage), feedback (str), record (EvaluationRecord).
        """
        if self._task is None:
            raise RuntimeError("step() called before reset(); call env.reset() to start an episode")
        if self._turn >= self.max_turns:
            raise RuntimeError(f"the episode is over ({self.max_turns} actions taken, truncated=True was returned); "
                               f"call env.reset() to start the next one")
        if self._ended and not self._warned_after_end:
            self._warned_after_end = True
            gymnasium.logger.warn("You are calling 'step()' even though this episode already returned terminated=True. "
                                  "You should call 'reset()' once you receive 'terminated=True': this step is "
                                  "judged, but its reward and observation belong to no episode.")
        record = self.judge.evaluate(self._task, action, self.preset, self._dtype)
        result = self.reward_fn(record)
        reward = result.value
        if self.turn_credit is TurnCredit.IMPROVEMENT:
            reward = improvement(result.value, self._best_reward)
        self._best_reward = result.value if self._best_reward is None else max(self._best_reward, result.value)
        if record.speedup is not None and record.correct:
            self._best_speedup = max(self._best_speedup, record.speedup)
        self._turn += 1
        terminated = record.correct and (not record.performance_available or
                                         (record.speedup is not None and record.speedup >= self.target_speedup))
        truncated = not terminated and self._turn >= self.max_turns
        self._ended = self._ended or terminated
        info = _info(record, result)
        info["turn_reward"] = result.value
        self._last = {"record": record, "reward": reward}
        return self._observation(record.feedback), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self._task is None:
            return "pkb-env: no episode (call reset)\n"
        head = f"[{self._task.name} | world {self.world_size} | {self.executor.info.name} | turn {self._turn}/{self.max_turns}]"
        record: EvaluationRecord | None = self._last.get("record")
        if record is None:
            return head + " waiting for the first action\n"
        return f"{head} verdict={record.verdict.value} reward={self._last['reward']:+.3f}\n{record.feedback}\n"

    def close(self) -> None:
        """Stop every rank process and remove the executor's files. Ctrl-C and SIGTERM arriving meanwhile are
        held until it is done (then raised as usual), so an impatient second Ctrl-C cannot leave half of it."""
        with _signals_held():
            self.executor.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _observation(self, feedback: str) -> dict[str, Any]:
        task = self._task
        topology = self._topology_text
        prompt = build_prompt(task, self.preset, self._dtype, self.world_size, topology, feedback, self._turn,
                              gpu=self.executor.placement.gpu, peaks=self._peaks)
        return {
            "prompt": S.to_charset(prompt, S.MAX_PROMPT_CHARS),
            "task_id": task.name,
            "reference": S.to_charset(task.reference_source, S.MAX_CODE_CHARS),
            "topology": S.to_charset(topology, S.MAX_FEEDBACK_CHARS),
            "feedback": S.to_charset(feedback, S.MAX_FEEDBACK_CHARS),
            "turn": self._turn,
            "world_size": self.world_size,
            "best_speedup": np.array(min(self._best_speedup, S.MAX_SPEEDUP), dtype=np.float32),
        }


@contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM for the block: note them, then hand them to the previous handlers afterwards.

    Python runs signal handlers in the main thread whichever thread the kernel picked, so blocking the
    signals in this thread would not hold them; swapping the handlers does. Off the main thread (where
    handlers cannot be set) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous = {sig: handler for sig, handler in previous.items() if handler is not None}  # None: set outside Python
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


def _info(record: EvaluationRecord, result) -> dict[str, Any]:
    return {
        "correct": record.correct,
        "verdict": record.verdict.value if record.verdict else None,
        "stage": record.stage.value,
        "error": record.error,
        "speedup": record.speedup,
        "roofline_fraction": record.roofline_fraction,
        "reward_terms": dict(result.terms),
        "flags": [f"{f.code}: {f.message}" for f in record.flags],
        "stage_seconds": dict(record.stage_seconds),
        "feedback": record.feedback,
        "record": record,
    }
