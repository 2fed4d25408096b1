"""Weights & Biases logging: a Gymnasium wrapper that records every judged step of a pkb-env episode.

    import gymnasium, pkb_env
    from pkb_env.entrypoints.gym.wandb import WandbLogger

    env = WandbLogger(gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=4),
                      project="pkb-env", config={"model": "my-model", "seed": 0})
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(completion)
    env.close()   # logs the kernels table, finishes the run, closes the env

## What is logged
config (once, at start):
    env       the env id, task pool, world size, executor (requested and resolved), hardware, preset, dtype,
              topology name, max_turns, target_speedup, turn_credit
    reward    the reward function's name, kind, bounds and full config (configs/rewards/<name>.yaml + overrides)
    judge     the JudgeConfig and the timing protocol in force
    versions  pkb-env, torch, gymnasium, numpy, wandb, cupy (when importable), python
    ...       your own `config`, at the top level (the four keys above are reserved)
per step (x axis `global_step`; nothing is logged with an explicit wandb `step`, so a run you pass in
keeps its own step counter):
    reward, reward/<term> (every numeric reward term), time/<stage> (judge seconds per stage),
    time/step (wall seconds of the whole step), correct (0/1), speedup and roofline_fraction (only when
    measured), verdict (the string) and verdict/<verdict> (one-hot, so that rates can be charted),
    flags/total, flags/exploit, turn (1-based within the episode), episode (0-based index), global_step
per episode (when it terminates or is truncated; also when reset() or close() cuts one short):
    episode/return, episode/length, episode/best_reward (the best uncredited turn reward),
    episode/best_speedup (of a correct action; 0 when none), episode/solved (terminated: the target was
    reached), episode/any_correct, episode/truncated
table "kernels" (one row per step): global_step, episode, turn, task, verdict, reward, speedup,
    roofline_fraction, feedback (trimmed), code (the action text, trimmed). A wandb.Table is immutable once
    logged, so the rows are kept here and a fresh table holding all of them is logged at close() and, with
    `table_every=N`, after every N steps. Only the latest `max_table_rows` rows are kept (default:
    wandb.Table.MAX_ROWS, beyond which wandb truncates a logged table anyway).

## Online or offline
`mode` wins when given; else WANDB_MODE when set; else "online" if credentials are configured (WANDB_API_KEY,
WANDB_IDENTITY_TOKEN_FILE, or a `wandb login` entry in ~/.netrc), and "offline" otherwise. An offline run
writes everything under `<dir>/wandb/offline-run-<time>-<id>/` and contacts no server. Upload it later:

    wandb sync <dir>/wandb/offline-run-*        # or, in <dir>: wandb sync --sync-all

(`wandb leet <dir>/wandb/offline-run-...` browses one in the terminal, also offline.) The run's history lives
in `run-<id>.wandb`, written by wandb-core in its own process: close() can return a moment before the
last records reach the file (tests/doors/test_wandb_logging.py reads it, waiting for the exit record).

## Secrets
The wrapper never reads an API key's value into anything it logs: the config is built from the env's own
attributes, never from environment variables; and every string it logs (code, feedback, verdict, your
config) has the judge user's secrets (secret-looking environment variables, ~/.netrc passwords, a Hugging
Face token file: pkb_env/redaction.py) replaced by "[redacted]". The candidate processes never see
WANDB_API_KEY at all: pkb_env.sandbox.variables gives rank processes an allowlist, and their
allowlisted root (sandbox/rootfs.py) holds no home and so no ~/.netrc.
"""
from __future__ import annotations

import importlib.metadata
import math
import netrc
import os
import platform
import time
from collections import deque
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

import gymnasium

from pkb_env.extras import require
from pkb_env.record import Verdict, jsonable
from pkb_env.redaction import Redactor

TABLE_COLUMNS = ("global_step", "episode", "turn", "task", "verdict", "reward", "speedup", "roofline_fraction",
                 "feedback", "code")
RESERVED_CONFIG_KEYS = ("env", "reward", "judge", "versions")
# metrics plotted against global_step (a run passed in keeps its own `_step` for everything else)
STEP_METRICS = ("reward", "reward/*", "time/*", "verdict", "verdict/*", "flags/*", "correct", "speedup",
                "roofline_fraction", "turn", "episode", "episode/*")


def _import_wandb():
    return require("wandb", "wandb", "WandbLogger")


class WandbLogger(gymnasium.Wrapper):
    """Log a ParallelKernelEnv's steps, episodes and submitted kernels to a wandb run.

    Args:
        env: a ParallelKernelEnv, possibly wrapped (gymnasium.make's wrappers are fine).
        run: a wandb run to log into; it is left running at close(). None: start one (and finish it at close).
        project, name: of the run started here.
        config: your own run config (model, seed, ...), merged at the top level next to the env's.
        mode: "online" | "offline" | "disabled"; None: see "Online or offline" in the module docstring.
        dir: where the run directory goes (`<dir>/wandb/...`); None: wandb's default (WANDB_DIR or cwd).
        log_kernels: keep the "kernels" table (code and feedback of every step).
        table_every: also log the table after every N steps (0: only at close()).
        max_code_chars, max_feedback_chars: trim the action text and the feedback in the table.
        max_table_rows: keep only the latest rows (memory: up to max_code_chars per row).

    The run is `self.run`; `self.global_step` and `self.episode` count steps and episodes across the run.
    """

    def __init__(self, env: gymnasium.Env, run: Any = None, project: str = "pkb-env", name: str | None = None,
                 config: Mapping[str, Any] | None = None, mode: str | None = None, dir: str | os.PathLike | None = None,
                 log_kernels: bool = True, *, table_every: int = 0, max_code_chars: int = 20_000,
                 max_feedback_chars: int = 4_000, max_table_rows: int | None = None):
        super().__init__(env)
        wandb = _import_wandb()
        self._wandb = wandb
        if not isinstance(table_every, int) or table_every < 0:
            raise ValueError(f"table_every must be a non-negative integer (0: log the table only at close()), "
                             f"got {table_every!r}")
        full_config = run_config(env)
        for key, value in (config or {}).items():
            if key in RESERVED_CONFIG_KEYS:
                raise ValueError(f"config key {key!r} is reserved by WandbLogger for the env's own settings "
                                 f"({', '.join(RESERVED_CONFIG_KEYS)}); rename it, e.g. 'user_{key}'")
            full_config[key] = value
        self._redactor = Redactor.of_judge()
        full_config = self._redactor.redact(full_config)
        self._owns_run = run is None
        if run is None:
            if dir is not None:
                Path(dir).mkdir(parents=True, exist_ok=True)
            run = wandb.init(project=project, name=name, config=full_config, mode=resolve_mode(mode),
                             dir=None if dir is None else str(dir), reinit="create_new")
        else:
            run.config.update(full_config, allow_val_change=True)
        self.run = run
        run.define_metric("global_step")
        for key in STEP_METRICS:
            run.define_metric(key, step_metric="global_step")
        self.log_kernels = log_kernels
        self.table_every = table_every
        self.max_code_chars, self.max_feedback_chars = max_code_chars, max_feedback_chars
        self._rows: deque[list[Any]] = deque(maxlen=max_table_rows or wandb.Table.MAX_ROWS)
        self._rows_added = 0
        self._rows_logged = 0
        self.global_step = 0
        self.episode = -1          # becomes 0 at the first reset
        self._task: str | None = None
        self._closed = False
        self._new_episode_stats()

    # -- Gymnasium API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self._length:
            self._log_episode(solved=False, truncated=False)   # cut short by reset
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode += 1
        self._task = info.get("task") if isinstance(info, dict) else None
        if self._task is None and isinstance(obs, dict):
            self._task = obs.get("task_id")
        self._new_episode_stats()
        return obs, info

    def step(self, action: str):
        start = time.perf_counter()
        obs, reward, terminated, truncated, info = self.env.step(action)
        wall = time.perf_counter() - start
        self.global_step += 1
        self._length += 1
        reward = float(reward)
        turn_reward = _number(info.get("turn_reward"))
        turn_reward = reward if turn_reward is None else turn_reward
        speedup = _number(info.get("speedup"))
        correct = bool(info.get("correct"))
        self._return += reward
        self._best_reward = turn_reward if self._best_reward is None else max(self._best_reward, turn_reward)
        if correct:
            self._any_correct = True
            if speedup is not None:
                self._best_speedup = max(self._best_speedup, speedup)
        self.run.log(self._step_metrics(reward, info, wall))
        if self.log_kernels:
            self._add_row(action, reward, info)
            if self.table_every and self._rows_added % self.table_every == 0:
                self._log_table()
        if terminated or truncated:
            self._log_episode(solved=bool(terminated), truncated=bool(truncated))
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Log the unfinished episode and the kernels table, finish the run (if started here), close the env."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._length:
                self._log_episode(solved=False, truncated=False)
            if self.log_kernels and self._rows_added > self._rows_logged:
                self._log_table()
        finally:
            try:
                super().close()
            finally:
                if self._owns_run:
                    self.run.finish()

    # -- logging -----------------------------------------------------------------------------------
    def _new_episode_stats(self) -> None:
        self._length = 0
        self._return = 0.0
        self._best_reward: float | None = None
        self._best_speedup = 0.0
        self._any_correct = False

    def _step_metrics(self, reward: float, info: dict[str, Any], wall: float) -> dict[str, Any]:
        metrics: dict[str, Any] = {"global_step": self.global_step, "episode": self.episode, "turn": self._length,
                                   "reward": reward, "correct": int(bool(info.get("correct"))), "time/step": wall}
        for term, value in (info.get("reward_terms") or {}).items():
            value = _number(value)
            if value is not None:
                metrics[f"reward/{term}"] = value
        for stage, seconds in (info.get("stage_seconds") or {}).items():
            seconds = _number(seconds)
            if seconds is not None:
                metrics[f"time/{stage}"] = seconds
        for key in ("speedup", "roofline_fraction"):
            value = _number(info.get(key))
            if value is not None:
                metrics[key] = value
        verdict = info.get("verdict")
        metrics["verdict"] = self._redactor.redact(str(verdict))
        for v in Verdict:
            metrics[f"verdict/{v.value}"] = int(verdict == v.value)
        record = info.get("record")
        metrics["flags/total"] = len(info.get("flags") or [])
        metrics["flags/exploit"] = len(record.exploit_flags) if record is not None else 0
        return metrics

    def _log_episode(self, solved: bool, truncated: bool) -> None:
        self.run.log({
            "global_step": self.global_step,
            "episode": self.episode,
            "episode/return": self._return,
            "episode/length": self._length,
            "episode/best_reward": self._best_reward if self._best_reward is not None else float("nan"),
            "episode/best_speedup": self._best_speedup,
            "episode/solved": int(solved),
            "episode/any_correct": int(self._any_correct),
            "episode/truncated": int(truncated),
        })
        self._new_episode_stats()

    def _add_row(self, action: object, reward: float, info: dict[str, Any]) -> None:
        code = action if isinstance(action, str) else repr(action)
        self._rows.append([
            self.global_step, self.episode, self._length, self._task, str(info.get("verdict")), reward,
            _number(info.get("speedup")), _number(info.get("roofline_fraction")),
            self._redactor.redact(_trim(str(info.get("feedback") or ""), self.max_feedback_chars)),
            self._redactor.redact(_trim(code, self.max_code_chars)),
        ])
        self._rows_added += 1

    def _log_table(self) -> None:
        table = self._wandb.Table(columns=list(TABLE_COLUMNS), data=[list(row) for row in self._rows])
        self.run.log({"kernels": table, "global_step": self.global_step})
        self._rows_logged = self._rows_added


# -- config ----------------------------------------------------------------------------------------
def run_config(env: gymnasium.Env) -> dict[str, Any]:
    """The run config describing `env` (a ParallelKernelEnv, possibly wrapped): see the module docstring."""
    from pkb_env.client import LocalClient
    from pkb_env.entrypoints.gym.env import ParallelKernelEnv

    base = env.unwrapped
    if not isinstance(base, ParallelKernelEnv):
        raise TypeError(f"WandbLogger wraps a ParallelKernelEnv, got {type(base).__name__}; create the env with "
                        f"gymnasium.make('pkb_env/ParallelKernel-v0', ...)")
    client = base.client
    info, config = client.info, client.config
    # the timing protocol in force: a local judge's (a pool's actors run the config's on their own clocks)
    protocol = client.run(lambda service: service.protocol) if isinstance(client, LocalClient) else None
    spec = getattr(env, "spec", None) or getattr(base, "spec", None)
    reward_fn = base.reward_fn
    return {
        "env": {
            "id": spec.id if spec is not None else None,
            "task_pool": list(base.task_pool),
            "world_size": base.world_size,
            "executor": info.name,
            "executor_requested": config.executor,
            "hardware": info.hardware,
            "performance_available": info.performance_available,
            "preset": config.preset,
            "dtype": config.dtype if config.dtype is not None else f"{config.preset} preset default",
            "topology": info.topology,
            "max_turns": base.max_turns,
            "target_speedup": base.target_speedup,
            "turn_credit": jsonable(base.turn_credit),
        },
        "reward": {"name": reward_fn.name, "kind": reward_fn.kind, "bounds": list(reward_fn.bounds),
                   "config": jsonable(dict(reward_fn.config))},
        "judge": {"config": jsonable(config), "protocol": jsonable(protocol)},
        "versions": package_versions(),
    }


def package_versions() -> dict[str, str]:
    """Versions of what decides a result: pkb-env, torch, gymnasium, numpy, wandb, cupy (if importable), python."""
    versions = {"python": platform.python_version()}
    for dist, module in (("pkb-env", "pkb_env"), ("torch", "torch"), ("gymnasium", "gymnasium"),
                         ("numpy", "numpy"), ("wandb", "wandb")):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = str(getattr(__import__(module), "__version__", "unknown"))
    try:
        import cupy  # noqa: PLC0415 (optional, GPU machines only)
        versions["cupy"] = cupy.__version__
    except Exception:  # ImportError, or a CUDA library cupy cannot load: either way, not in use
        pass
    return versions


def resolve_mode(mode: str | None) -> str:
    """`mode` if given, else WANDB_MODE if set, else "online" with credentials configured and "offline" without."""
    if mode is not None:
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if credentials_configured() else "offline"


def credentials_configured() -> bool:
    """Whether wandb could authenticate: WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE, or a ~/.netrc entry.

    Only presence is checked; no value is read into anything that is logged.
    """
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    path = os.environ.get("NETRC") or str(Path.home() / ".netrc")
    try:
        return host is not None and netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


# -- helpers ---------------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    """A finite float, or None for anything else (None, strings, nan, inf)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _trim(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [{len(text) - limit} more characters trimmed]"


__all__ = ["WandbLogger", "run_config", "package_versions", "resolve_mode", "credentials_configured",
           "TABLE_COLUMNS"]
