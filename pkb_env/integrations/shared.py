"""One judge per process and judge config, shared by every call of a trainer adapter (docs/integrations.md).

A trainer calls its reward function once per sample and makes an env per trajectory, often from several
threads (verl's reward loop runs samples as concurrent coroutines, SkyRL steps envs in a thread pool),
while a JudgeService owns rank processes that take seconds to start and judges one step at a time
(pkb_env/service.py). So the adapters never make a service themselves: `shared_judge(config)` makes one
at its first use, keyed by its JudgeConfig, and serialises its calls; `shared_pool` does the same for a
JudgePool on a Ray cluster (docs/scale_out.md). Everything made here is closed at the interpreter's exit
(or by `close_all`).

`read_settings` turns a trainer's plain settings (verl's reward_kwargs, SkyRL's env_config) into a
JudgeConfig and the adapter's own options, refusing unknown names with the closest known one;
`reward_function` loads the reward they name.
"""
from __future__ import annotations

import atexit
import functools
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from pkb_env.config import ConfigError, JudgeConfig
from pkb_env.errors import JudgeError
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import RewardFunction, load_reward
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
    """A JudgeService for many callers: sessions cached per (task, preset, dtype), one step at a time."""

    def __init__(self, config: JudgeConfig):
        self.service = JudgeService(config)
        self.lock = threading.Lock()
        self._sessions: dict[tuple, TaskSession] = {}

    def session(self, task: str, preset: str | None = None, dtype: str | None = None) -> TaskSession:
        """The open session on `task` (TaskError naming the fix when it cannot be judged here)."""
        key = (task, preset, dtype)
        with self.lock:
            if key not in self._sessions:
                self._sessions[key] = self.service.open(task, preset, dtype)
            return self._sessions[key]

    def judge(self, session: TaskSession, code: str) -> EvaluationRecord:
        """Judge `code` on `session`. A JudgeError (the judge failed, not the code: pkb_env/errors.py) becomes
        a JUDGE_ERROR record, scored 0 and marked unjudged, so one bad step does not end a training run."""
        with self.lock:
            try:
                return session.judge(code)
            except JudgeError as exc:
                service = self.service
                return EvaluationRecord.unjudged(session.name, service.world_size, session.preset, session.dtype,
                                                 service.info.name, service.info.hardware, str(exc))

    def close(self) -> None:
        with self.lock:
            self._sessions.clear()
            self.service.close()


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
