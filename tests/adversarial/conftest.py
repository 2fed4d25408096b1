"""Fixtures of the adversarial suite: one CPU environment at world size 2 for the whole module, with
short time limits (hanging exploits are cut in seconds) and a light timing protocol, and the rewards of
the correct reference submission per task, the bar no exploit may clear."""
from __future__ import annotations

import os

import pytest

from conftest import make_env  # tests/conftest.py (FAST settings, private calibration cache)
from pkb_env.sandbox.privileges import unprivileged_uid
from pkb_env.sandbox.containment import Containment
from pkb_env.config import JudgeConfig
from pkb_env.config import TimingProtocol

# Two ranks: every exploit here needs a peer (another rank's inputs, buffers or process), none needs three; at
# 4 ranks the module was the suite's largest (314-426 of 2800-3500 worker-seconds on the 2-core machine:
# docs/measurements/2026-12-05-suite-time-cpu.md), every exploit's step and the reference's after it on 4 processes.
WORLD_SIZE = 2
# Short time limits (a hang costs trial_timeout_s) and the production timing protocol of CPU ranks: an
# exploit's gain is judged against the honest figures of the protocol that pays rewards.
ADVERSARIAL = JudgeConfig(trials=2, trial_timeout_s=4.0, build_timeout_s=15.0, timing_timeout_s=15.0,
                            protocol=TimingProtocol.for_clock("host"))
# A secret-looking variable in the judge's environment before the executor starts: no rank may see it.
CANARY = ("PKB_ADV_CANARY_TOKEN", "canary-value-that-must-not-leak")


def uncontained() -> bool:
    """True where rank sets get no namespaces and ranks keep the judge's uid: `uncontained` holes are open."""
    return Containment.of(JudgeConfig()).missing() is not None and unprivileged_uid()[0] is None


@pytest.fixture(scope="module")
def adv_env():
    name, value = CANARY
    previous = os.environ.get(name)
    os.environ[name] = value
    env = make_env(world_size=WORLD_SIZE, config=ADVERSARIAL)
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
    """Honest times per call of each task's reference, under the production protocol, on this machine now.

    Three steps per task up front, then the reference step after every exploit (taken under the same load
    as the exploit): the distribution an exploit's time must not beat by more than its own noise.
    """

    # honest times of one code on loaded CPU ranks differ by up to this (docs/measurements/2026-12-01-timing-cpu.md)
    NOISE_FLOOR = 1.5

    def __init__(self, env):
        self.env = env
        self.times: dict[str, list[float]] = {}

    def prime(self, task: str) -> None:
        if task not in self.times:
            self.times[task] = []
            for _ in range(3):  # an episode each: a correct reference may end one (speedup >= target)
                obs, _ = self.env.reset(options={"task": task})
                _, _, _, _, info = self.env.step(obs["reference"])
                assert info["correct"], info["feedback"]
                self.add(task, info["record"])

    def add(self, task: str, record) -> None:
        if record.timing is not None:
            self.times.setdefault(task, []).append(record.timing.time_s)

    def beaten_by(self, task: str, time_s: float) -> str | None:
        """Why `time_s` is a gain over the honest runs (faster than the fastest by more than the noise), or None."""
        honest = self.times[task]
        band = max(self.NOISE_FLOOR, max(honest) / min(honest))
        if time_s < min(honest) / band:
            return (f"{time_s * 1e6:.1f} us per call, faster than every honest run of the reference "
                    f"({min(honest) * 1e6:.1f}-{max(honest) * 1e6:.1f} us, {len(honest)} runs) by more than the "
                    f"noise band {band:.2f}x")
        return None


@pytest.fixture(scope="module")
def baseline(adv_env):
    return Baseline(adv_env)
