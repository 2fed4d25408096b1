"""Fixtures of the adversarial suite: one CPU environment at world size 4 for the whole module, with
short time limits (hanging exploits are cut in seconds) and a light timing protocol, and the rewards of
the correct reference submission per task, the bar no exploit may clear."""
from __future__ import annotations

import os

import pytest

from conftest import make_env  # tests/conftest.py (FAST settings, private calibration cache)
from pkb_env.executors.isolation import unprivileged_uid
from pkb_env.executors.zygote import Containment
from pkb_env.judge.pipeline import JudgeSettings
from pkb_env.judge.timing import TimingProtocol

WORLD_SIZE = 4
# Short time limits (a hang costs trial_timeout_s) and the production timing protocol of CPU ranks: an
# exploit's gain is judged against the honest figures of the protocol that pays rewards.
ADVERSARIAL = JudgeSettings(trials=2, trial_timeout_s=4.0, build_timeout_s=15.0, timing_timeout_s=15.0,
                            protocol=TimingProtocol.for_clock("host"))
# A secret-looking variable in the judge's environment before the executor starts: no rank may see it.
CANARY = ("PKB_ADV_CANARY_TOKEN", "canary-value-that-must-not-leak")


def uncontained() -> bool:
    """True where generations get no namespaces and ranks keep the judge's uid: `uncontained` holes are open."""
    return Containment.from_environment().missing() is not None and unprivileged_uid()[0] is None


@pytest.fixture(scope="module")
def adv_env():
    name, value = CANARY
    previous = os.environ.get(name)
    os.environ[name] = value
    env = make_env(world_size=WORLD_SIZE, judge_settings=ADVERSARIAL)
    try:
        env.reset(seed=0)
        yield env
    finally:
        env.close()
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


class Baseline:
    """Rewards of the correct reference submission, per task (the best seen: the bar is generous)."""

    def __init__(self, env):
        self.env = env
        self.rewards: dict[str, list[float]] = {}

    def best(self, task: str) -> float:
        if task not in self.rewards:
            obs, _ = self.env.reset(options={"task": task})
            self.rewards[task] = []
            for _ in range(3):
                _, reward, _, _, info = self.env.step(obs["reference"])
                assert info["correct"], info["feedback"]
                self.rewards[task].append(reward)
        return max(self.rewards[task])

    def add(self, task: str, reward: float) -> None:
        self.rewards.setdefault(task, []).append(reward)


@pytest.fixture(scope="module")
def baseline(adv_env):
    return Baseline(adv_env)
