"""No answer key in reach on a GPU (docs/containment.md): the searching candidate of
tests/sandbox/test_answer_key.py, judged by the cuda executors, finds no solution source from a rank on a GPU,
neither as the checkout's editable install runs the judge nor as a wheel installed elsewhere does."""
from __future__ import annotations

import pytest

from pkb_env import JudgeService
from pkb_env.config import JudgeConfig
from sandbox.test_answer_key import judged_from_a_wheel, searching_candidate


@pytest.mark.parametrize("executor,world_size", [("cuda", 1), ("cuda-emulated", 2)])
def test_a_gpu_rank_of_the_checkout_finds_no_answer_key(executor, world_size):
    config = JudgeConfig(executor=executor, world_size=world_size, trials=1, trial_timeout_s=240.0)
    with JudgeService(config) as judge:
        record = judge.judge("all_reduce", searching_candidate())
    assert record.verdict.value == "correct", record.feedback


def test_a_gpu_rank_of_a_wheel_install_finds_no_answer_key(tmp_path):
    result = judged_from_a_wheel(tmp_path, "cuda", 1, isolated=False)   # the GPU machines have no package index
    assert result["verdict"] == "correct", result["feedback"]
