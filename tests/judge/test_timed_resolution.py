"""The timed-output check's resolution (issue 31, item 5; docs/timing.md, "Resolution").

A candidate right on the trials that multiplies half of its output by 1.02 in one call of every 40 is
1.28x the bf16 tolerance on the larger elements of that call and within it elsewhere: the projections'
aggregate bound cannot see it (on one H200 it was judged correct in 3 steps of 3). The values at secret
positions of every timed call, compared element by element, catch it in every step here, on CPU ranks
in bf16 with the production protocol (tests/gpu/test_timed_resolution_gpu.py runs the same on a GPU).
"""
from __future__ import annotations

import pytest

from conftest import PRODUCTION, cpu_judge
from pkb_env.task import load_task

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
    with cpu_judge(2, PRODUCTION.replace(dtype="bfloat16")) as judge:
        yield judge


def test_a_two_percent_nudge_in_one_timed_call_of_forty_is_caught_in_every_step(bf16):
    caught = []
    for _ in range(STEPS):
        record = bf16.judge("all_reduce", NUDGE)
        assert record.verify.correct, record.feedback  # right on every trial: only timed calls are off
        caught.append(record.verdict.value == "wrong" and "elements at secret positions differ" in record.feedback)
    assert all(caught), caught


def test_the_reference_in_bf16_stays_correct(bf16):
    reference = load_task("all_reduce").reference_source
    for _ in range(3):
        record = bf16.judge("all_reduce", reference)
        assert record.verdict.value == "correct", record.feedback
