"""No answer key in reach on a GPU (docs/containment.md): the searching candidate of
tests/sandbox/test_answer_key.py, judged by the cuda executors, finds no solution source from a rank on a GPU,
neither as the checkout's editable install runs the judge nor as a wheel installed elsewhere does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from pkb_env import JudgeService
from pkb_env.config import JudgeConfig
from sandbox.test_answer_key import CHECKOUT, searching_candidate


@pytest.mark.parametrize("executor,world_size", [("cuda", 1), ("cuda-emulated", 2)])
def test_a_gpu_rank_of_the_checkout_finds_no_answer_key(executor, world_size):
    config = JudgeConfig(executor=executor, world_size=world_size, trials=1, trial_timeout_s=240.0)
    with JudgeService(config) as judge:
        record = judge.judge("all_reduce", searching_candidate())
    assert record.verdict.value == "correct", record.feedback


def test_a_gpu_rank_of_a_wheel_install_finds_no_answer_key(tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(CHECKOUT)], check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    *map(str, wheels.glob("*.whl"))], check=True, capture_output=True, timeout=600)
    code = tmp_path / "candidate.py"
    code.write_text(searching_candidate())
    driver = (
        "import json, sys, pkb_env\n"
        "from pkb_env import JudgeConfig, JudgeService\n"
        "config = JudgeConfig(executor='cuda', world_size=1, trials=1, trial_timeout_s=240.0)\n"
        "with JudgeService(config) as judge:\n"
        "    record = judge.judge('all_reduce', open(sys.argv[1]).read())\n"
        "print(json.dumps({'package': pkb_env.__file__, 'verdict': record.verdict.value, 'feedback': record.feedback}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
           "PKB_ENV_CACHE": tempfile.mkdtemp(dir=tmp_path)}
    done = subprocess.run([sys.executable, "-c", driver, str(code)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["package"].startswith(str(target)), f"the wheel's pkb_env was not the one imported: {result}"
    assert result["verdict"] == "correct", result["feedback"]
