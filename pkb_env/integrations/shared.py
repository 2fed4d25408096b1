"""One judge per process and judge config, shared by every call of a trainer adapter (docs/integrations.md).

A trainer calls its reward function once per sample and makes an env per trajectory, often from several
threads (verl's reward loop runs samples as concurrent coroutines, SkyRL steps envs in a thread pool,
OpenEnv's server runs each session on a thread of its own, verifiers' rollouts are coroutines), while a
JudgeService owns rank processes that take seconds to start and judges one step at a time
(pkb_env/service.py). So the adapters never make a service themselves: `shared_judge(config)` makes one
at its first use, keyed by its JudgeConfig, and runs its calls one at a time on a thread of its own;
`shared_pool` does the same for a JudgePool on a Ray cluster (docs/scale_out.md). Everything made here
is closed at the interpreter's exit (or by `close_all`).

`read_settings` turns a trainer's plain settings (verl's reward_kwargs, SkyRL's env_config) into a
JudgeConfig and the adapter's own options, refusing unknown names with the closest known one;
`reward_function` loads the reward they name; `Episode` keeps the multi-turn episode rules the
SkyRL env, the OpenEnv server's sessions and the verifiers env share.
"""
from __future__ import annotations

import asyncio
import atexit
import functools
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pkb_env.config import ConfigError, JudgeConfig
from pkb_env.env import reached, step_info
from pkb_env.errors import JudgeError
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import RewardFunction, RewardResult, load_reward
from pkb_env.service import JudgeService, TaskSession


@dataclass(frozen=True)
class Settings:
    """What an adapter judges with: the judge's config, and the adapter's own options (name: value)."""

    config: JudgeConfig
    options: dict


def plain(value: Any) -> Any:
    """Mappings and sequences as dicts and lists (OmegaConf's DictConfig/ListConfig, which trainers pass), numpy
    scalars as Python's (a parquet column read back may give numpy.int32, which JudgeConfig refuses)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


def read_settings(values: Mapping[str, Any] | None, where: str, options: Mapping[str, Any]) -> Settings:
    """Split `values` into JudgeConfig settings and the adapter's `options` (name: default). `where` names
    the trainer's setting in errors, so that the message points at the line to fix."""
    values = plain(values or {})
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping of setting: value, got {type(values).__name__}")
    values = {k.replace("-", "_"): v for k, v in values.items()}
    own = {name: values.pop(name, default) for name, default in options.items()}
    try:
        config = JudgeConfig.from_mapping(values)
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}; besides the judge's settings it takes {', '.join(options)}") from exc
    return Settings(config, own)


@functools.lru_cache(maxsize=None)
def reward_function(name: Any, where: str) -> RewardFunction:
    """The reward named in the settings at `where`, loaded once (rewards are pure functions of a record)."""
    if not isinstance(name, str):
        raise ConfigError(f"{where}: reward must be a reward config's name or a YAML path, got {name!r}")
    try:
        return load_reward(name)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{where}: reward: {exc}") from exc


class SharedJudge:
    """A JudgeService for many callers: sessions cached per (task, preset, dtype), every call on one thread.

    The service is made, used and closed on a thread of its own that lives as long as it does: it judges one
    step at a time, and its zygote dies with the thread that started it (PR_SET_PDEATHSIG follows the thread:
    pkb_env/pool/actors.py), so no caller's thread, which may end first (a server session's, an executor's),
    may start it. Callers block on `session`/`judge` (from any thread) or await `asession`/`ajudge` (from an
    event loop, which then stays free while the step runs); calls run in their order of arrival.
    """

    def __init__(self, config: JudgeConfig):
        self.service = JudgeService(config)   # starts nothing: the first session starts the rank processes
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pkb-judge")
        self._sessions: dict[tuple, TaskSession] = {}
        self._closed = False

    def session(self, task: str, preset: str | None = None, dtype: str | None = None) -> TaskSession:
        """The open session on `task` (TaskError naming the fix when it cannot be judged here)."""
        return self._thread.submit(self._session, task, preset, dtype).result()

    def judge(self, session: TaskSession, code: str) -> EvaluationRecord:
        """Judge `code` on `session`. A JudgeError (the judge failed, not the code: pkb_env/errors.py) becomes
        a JUDGE_ERROR record, scored 0 and marked unjudged, so one bad step does not end a training run."""
        return self._thread.submit(self._judge, session, code).result()

    async def asession(self, task: str, preset: str | None = None, dtype: str | None = None) -> TaskSession:
        return await self._awaited(self._session, task, preset, dtype)

    async def ajudge(self, session: TaskSession, code: str) -> EvaluationRecord:
        return await self._awaited(self._judge, session, code)

    async def _awaited(self, fn: Callable, *args) -> Any:
        return await asyncio.wrap_future(self._thread.submit(fn, *args))

    def _session(self, task: str, preset: str | None, dtype: str | None) -> TaskSession:
        key = (task, preset, dtype)
        if key not in self._sessions:
            self._sessions[key] = self.service.open(task, preset, dtype)
        return self._sessions[key]

    def _judge(self, session: TaskSession, code: str) -> EvaluationRecord:
        try:
            return session.judge(code)
        except JudgeError as exc:
            service = self.service
            return EvaluationRecord.unjudged(session.name, service.world_size, session.preset, session.dtype,
                                             service.info.name, service.info.hardware, str(exc))

    def prestart(self) -> None:
        """Start the rank processes now, in the background (a server's first step then need not wait)."""
        self._thread.submit(self.service.prestart)

    def close(self) -> None:
        """Stop the rank processes (after the step in progress, if any) and the judge's thread; again: nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.submit(self._close).result()
        except RuntimeError:   # at the interpreter's exit its threads are joined before atexit runs: close here
            self._close()
        finally:
            self._thread.shutdown(wait=True)

    def _close(self) -> None:
        self._sessions.clear()
        self.service.close()


class Episode:
    """One multi-turn episode on one task, by the Gymnasium env's rules (pkb_env/env.py, ParallelKernelEnv):
    each judged turn's reward is the reward function's value of its record; the episode is over when a correct
    completion reaches `target_speedup` (or is correct where speed is not measured), or after `max_turns`
    turns. The adapters judge in their own ways (a shared judge's thread, an event loop) and hand the record
    to `take`. `where` names the settings in errors (the trainer's config key the user would fix); they are
    checked before the session, which starts rank processes, is opened and set."""

    def __init__(self, reward_fn: RewardFunction, max_turns: Any = 4, target_speedup: Any = 1.0,
                 where: str = "settings", session: TaskSession | None = None):
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns ({where}) must be a positive integer, got {max_turns!r}")
        target = target_speedup
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target):
            raise ValueError(f"{where}: target_speedup must be a number (1.0: as fast as the reference), "
                             f"got {target!r}")
        self.session, self.reward_fn = session, reward_fn
        self.max_turns, self.target_speedup = max_turns, float(target)
        self.turns = 0
        self.rewards: list[float] = []
        self.best_speedup: float | None = None
        self.solved = False
        self.judge_errors = 0

    @property
    def over(self) -> bool:
        return self.solved or self.turns >= self.max_turns

    def check_open(self) -> None:
        """Raise, naming the fix, when the episode is over (a further turn belongs to no episode)."""
        if self.over:
            why = "solved" if self.solved else f"{self.max_turns} turns taken"
            raise RuntimeError(f"the episode is over ({why}; done was returned): start a new episode")

    def take(self, record: EvaluationRecord) -> tuple[RewardResult, bool]:
        """Count the judged turn of `record`: its reward and whether the episode is now over."""
        self.check_open()
        result = self.reward_fn(record)
        self.turns += 1
        self.rewards.append(float(result.value))
        self.judge_errors += not record.judged
        if record.correct and record.speedup is not None:
            self.best_speedup = max(self.best_speedup or 0.0, record.speedup)
        self.solved = record.correct and (not record.performance_available or reached(record, self.target_speedup))
        return result, self.over

    def info(self, record: EvaluationRecord, result: RewardResult) -> dict[str, Any]:
        """The Gymnasium env's step info (ParallelKernelEnv.step) as plain data, and the turn."""
        info = {k: v for k, v in step_info(record, result).items() if k != "record"}
        info["turn"] = self.turns
        return info

    def feedback_message(self, record: EvaluationRecord) -> str:
        """The judge's feedback as the prompt of the next turn words it, without the first prompt again (a chat
        keeps that prompt in its history)."""
        head = self.session.prompt.rstrip("\n")
        after = self.session.prompt_after(record.feedback, self.turns)
        return after[len(head):].strip() if after.startswith(head) else after

    def metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "solved": float(self.solved), "best_reward": max(self.rewards, default=0.0),
                "best_speedup": self.best_speedup, "judge_errors": self.judge_errors}


_judges: dict[JudgeConfig, SharedJudge] = {}
_pools: dict[tuple, Any] = {}
_guard = threading.Lock()


def shared_judge(config: JudgeConfig) -> SharedJudge:
    """This process's judge for `config`, made at the first call."""
    with _guard:
        if config not in _judges:
            _judges[config] = SharedJudge(config)
        return _judges[config]


def shared_pool(config: JudgeConfig, address: str, actors: int | None = None):
    """This process's JudgePool for `config` on the Ray cluster at `address`, made at the first call."""
    from pkb_env.pool import JudgePool

    key = (config, address, actors)
    with _guard:
        if key not in _pools:
            _pools[key] = JudgePool(config, address=address, actors=actors)
        return _pools[key]


def close_all() -> None:
    """Close every judge and pool made here (their rank processes and actors stop)."""
    with _guard:
        made = list(_judges.values()) + list(_pools.values())
        _judges.clear()
        _pools.clear()
    for judge in made:
        judge.close()


atexit.register(close_all)
