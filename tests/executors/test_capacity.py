"""The executor's limits and hooks: the world-size limit derived from the machine, the progress hook the
CLI draws its status line from, and the directory that goes at interpreter exit even without close()."""
from __future__ import annotations

import os
import subprocess
import sys

import gymnasium
import pytest

from conftest import cpu_judge, still_alive
from pkb_env.config import JudgeConfig
from pkb_env.executors import ExecutorError, check_world_size, make_executor
from pkb_env.executors.capacity import (CPU_RANKS_PER_CORE, EMULATED_RANKS_PER_GPU, OVERRIDE, usable_cores,
                                        world_size_limit)


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(OVERRIDE, raising=False)


def test_cpu_limit_is_usable_cores_times_the_stated_factor():
    assert usable_cores() == len(os.sched_getaffinity(0))
    limit = world_size_limit("cpu", gpus=0)
    assert limit.limit == usable_cores() * CPU_RANKS_PER_CORE
    assert check_world_size("cpu", limit.limit) == "cpu"
    with pytest.raises(ExecutorError) as error:
        check_world_size("cpu", limit.limit + 1)
    message = str(error.value)
    assert f"world size {limit.limit + 1}" in message and f"the limit is {limit.limit}" in message
    assert "usable core(s)" in message and f"{OVERRIDE}={limit.limit + 1}" in message


def test_gpu_limits():
    assert world_size_limit("cuda", gpus=8).limit == 8
    emulated = world_size_limit("cuda-emulated", gpus=2)
    assert emulated.limit == min(2 * EMULATED_RANKS_PER_GPU, usable_cores() * CPU_RANKS_PER_CORE)
    with pytest.raises(ExecutorError, match="the limit is 2 .*one rank per GPU.*cuda-emulated"):
        world_size_limit("cuda", gpus=2).check(3)


def test_override_replaces_the_oversubscription_limits_but_never_the_gpu_count(monkeypatch):
    monkeypatch.setenv(OVERRIDE, "5000")
    assert world_size_limit("cpu", 0).limit == 5000 and world_size_limit("cuda-emulated", 1).limit == 5000
    assert world_size_limit("cuda", 2).limit == 2
    monkeypatch.setenv(OVERRIDE, "lots")
    with pytest.raises(ExecutorError, match=f"{OVERRIDE}='lots' is not a positive integer"):
        world_size_limit("cpu", 0)


def test_the_env_refuses_before_any_process_or_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    too_many = usable_cores() * CPU_RANKS_PER_CORE + 1
    with pytest.raises(ExecutorError, match="the limit is"):
        gymnasium.make("pkb_env/ParallelKernel-v0", world_size=too_many, executor="cpu")
    with pytest.raises(ValueError, match="positive integer"):
        make_executor(JudgeConfig(executor="cpu", world_size=True))
    assert not list(tmp_path.iterdir())


def test_progress_hook_reports_every_rank_of_each_phase():
    events = []
    with cpu_judge(3, progress=lambda *event: events.append(event)) as judge:
        session = judge.open("all_reduce")
        record = judge.judge("all_reduce", session.reference)
        assert record.correct, record.feedback
    for role in ("reference", "candidate"):
        # Whole rounds of 1, 2, 3: the first step may wait for the next candidate rank set too (it lets
        # ranks finish starting before the calibration is measured).
        start = [done for r, phase, done, total in events if r == role and phase == "start-up"]
        assert start and start == [1, 2, 3] * (len(start) // 3), (role, events[:10])
    assert {total for *_, total in events} == {3}
    assert any(r == "candidate" and phase == "build" and done == 3 for r, phase, done, _ in events)


def test_the_directory_goes_at_exit_even_without_close(tmp_path):
    """A script that never calls env.close(): the processes die with it and the directory is removed."""
    code = ("import gymnasium, pkb_env; "
            "env = gymnasium.make('pkb_env/ParallelKernel-v0', world_size=2, executor='cpu'); env.reset(seed=0); "
            "print(*env.unwrapped.client.run(lambda s: [s.directory(), *s.process_ids()]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    root, *pids = done.stdout.split()
    assert root.startswith(str(tmp_path)) and pids
    assert not still_alive([int(p) for p in pids], wait_s=10)
    assert not os.path.exists(root)
    assert not list(tmp_path.iterdir())
