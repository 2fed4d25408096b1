"""Shared fixtures: one CPU environment per test module (rank processes are expensive to start)."""
from __future__ import annotations

import os
import time

import gymnasium
import psutil
import pytest

import pkb_env  # noqa: F401  (registers the env)
from pkb_env.judge.pipeline import JudgeSettings
from pkb_env.judge.timing import TimingProtocol

# Short time limits so that hangs and deadlocks are cut quickly; a light timing protocol for speed.
FAST = JudgeSettings(trials=2, trial_timeout_s=6.0, build_timeout_s=20.0, timing_timeout_s=30.0,
                     protocol=TimingProtocol(warmup_s=0.05, measure_s=0.25, min_calls=10, max_calls=60, statistic="min"))


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Calibrations go to a temporary cache, not the user's ~/.cache."""
    os.environ["PKB_ENV_CACHE"] = str(tmp_path_factory.mktemp("pkb-cache"))


def make_env(task="all_reduce", world_size=4, **kwargs):
    kwargs.setdefault("judge_settings", FAST)
    kwargs.setdefault("max_turns", 1000)
    return gymnasium.make("pkb_env/ParallelKernel-v0", task=task, world_size=world_size, executor="cpu", **kwargs)


@pytest.fixture(scope="module")
def env2():
    env = make_env(world_size=2)
    env.reset(seed=0)
    yield env
    env.close()


@pytest.fixture(scope="module")
def env4():
    env = make_env(world_size=4)
    env.reset(seed=0)
    yield env
    env.close()


def still_alive(pids: list[int], wait_s: float) -> list[int]:
    """The processes among `pids` still running (zombies count as gone) after waiting up to wait_s for them."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)
