"""The issue-31 nudge on one GPU: all_reduce at bench in bf16, world size 1, the cuda executor.

A candidate that multiplies half of its output by 1.02 in one timed call of 40 (calls after the 20th) was
judged correct in 3 steps of 3 on one H200 before the values at secret positions were compared; now it
must be caught in most steps (docs/timing.md, "Resolution"). The reference stays correct.
"""
import gymnasium
import pytest

import pkb_env  # noqa: F401
from judge.test_timed_resolution import NUDGE  # the same candidate as on CPU ranks (tests/ is on sys.path)

STEPS = 20


@pytest.fixture(scope="module")
def cuda1():
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=1, executor="cuda",
                         preset="bench", max_turns=1000)
    yield env
    env.close()


def test_the_nudge_is_caught_in_most_of_20_steps(cuda1):
    verdicts = []
    for _ in range(STEPS):
        cuda1.reset(options={"task": "all_reduce"})
        info = cuda1.step(NUDGE)[4]
        verdicts.append(info["verdict"])
    assert verdicts.count("wrong") >= 0.9 * STEPS, verdicts


def test_the_reference_stays_correct_in_bf16_at_bench(cuda1):
    obs, _ = cuda1.reset(options={"task": "all_reduce"})
    for _ in range(5):
        cuda1.reset(options={"task": "all_reduce"})
        info = cuda1.step(obs["reference"])[4]
        assert info["verdict"] == "correct", info["feedback"]
