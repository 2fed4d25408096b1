"""The timed-output check's resolution (issue 31, item 5; docs/timing.md, "Resolution").

A candidate right on the trials that multiplies half of its output by 1.02 in one call of every 40 is
1.28x the bf16 tolerance on the larger elements of that call and within it elsewhere: the projections'
aggregate bound cannot see it (on one H200 it was judged correct in 3 steps of 3). The values at secret
positions of every timed call, compared element by element, catch it in every step here, on CPU ranks
in bf16 with the production protocol (tests/gpu/test_timed_resolution_gpu.py runs the same on a GPU).
"""
from __future__ import annotations

import pytest
from conftest import make_env

from pkb_env.config import JudgeConfig, TimingProtocol

PRODUCTION = JudgeConfig(trials=2, trial_timeout_s=10.0, timing_timeout_s=30.0,
                         protocol=TimingProtocol.for_clock("host"))
STEPS = 5

NUDGE = """
import torch, torch.distributed as dist
_calls = [0]
def solution(tensor):
    _calls[0] += 1
    out = tensor.clone()
    dist.all_reduce(out)
    if _calls[0] > 20 and _calls[0] % 40 == 0:
        half = out.view(-1)[: out.numel() // 2]
        half.copy_((half.float() * 1.02).to(out.dtype))
    return out
"""


@pytest.fixture(scope="module")
def bf16():
    env = make_env(world_size=2, dtype="bfloat16", config=PRODUCTION)
    yield env
    env.close()


def test_a_two_percent_nudge_in_one_timed_call_of_forty_is_caught_in_every_step(bf16):
    caught = []
    for _ in range(STEPS):
        bf16.reset(options={"task": "all_reduce"})
        info = bf16.step(NUDGE)[4]
        assert info["record"].verify.correct, info["feedback"]  # right on every trial: only timed calls are off
        caught.append(info["verdict"] == "wrong" and "elements at secret positions differ" in info["feedback"])
    assert all(caught), caught


def test_the_reference_in_bf16_stays_correct(bf16):
    obs, _ = bf16.reset(options={"task": "all_reduce"})
    for _ in range(3):
        bf16.reset(options={"task": "all_reduce"})
        info = bf16.step(obs["reference"])[4]
        assert info["verdict"] == "correct", info["feedback"]
