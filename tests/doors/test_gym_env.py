"""The public Gymnasium contract: registration, spaces, check_env, reset options, render, bad input, the
episode's end and executor="auto" (that its close() holds an impatient Ctrl-C until every process is gone:
tests/executors/test_injected_faults.py)."""
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import pkb_env
from conftest import FAST, make_env
from pkb_env.task import TaskError, load_task


def test_registered():
    assert pkb_env.ENV_ID in gymnasium.registry
    assert gymnasium.registry[pkb_env.ENV_ID].nondeterministic


def test_check_env_passes():
    env = make_env(world_size=2)
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


def test_observation_keys_and_reset_switches_task():
    env = make_env(world_size=2, render_mode="ansi")
    try:
        obs, info = env.reset(seed=3, options={"task": "all_gather"})
        assert env.observation_space.contains(obs)
        assert obs["task_id"] == "all_gather" and info["task"] == "all_gather"
        assert obs["reference"] in obs["prompt"] and "world size 2" in obs["prompt"]
        assert obs["feedback"] == "" and obs["turn"] == 0 and obs["topology"]
        assert "all_gather" in env.render()
        obs, reward, terminated, truncated, info = env.step("not python at all ((")
        assert info["verdict"] == "unparsable" and obs["turn"] == 1 and obs["feedback"]
        assert env.observation_space.contains(obs)
        for key in ("correct", "speedup", "roofline_fraction", "reward_terms", "stage", "error", "flags", "record"):
            assert key in info
        assert "unparsable" in env.render()
    finally:
        env.close()


def test_multi_turn_termination_and_truncation():
    env = make_env(world_size=2, max_turns=2, target_speedup=1e9)
    try:
        obs, _ = env.reset(seed=0)
        _, _, terminated, truncated, _ = env.step("garbage")
        assert not terminated and not truncated
        _, _, terminated, truncated, _ = env.step(obs["reference"])
        assert not terminated and truncated  # correct, but the target speedup is out of reach
        with pytest.raises(RuntimeError, match="truncated=True was returned.*reset"):
            env.step(obs["reference"])
        env.unwrapped.target_speedup = 0.0   # the next episode's target
        obs, _ = env.reset(seed=0)
        _, _, terminated, truncated, info = env.step(obs["reference"])
        assert terminated and not truncated and info["correct"]
        assert obs["best_speedup"] == np.float32(0.0)
    finally:
        env.close()


def test_step_after_terminated_warns_once_and_is_still_judged():
    env = make_env(world_size=2, max_turns=4, target_speedup=0.0)
    try:
        obs, _ = env.reset(seed=0)
        _, _, terminated, _, _ = env.step(obs["reference"])
        assert terminated
        with pytest.warns(UserWarning, match="already returned terminated=True.*reset"):
            obs, _, _, _, info = env.step(obs["reference"])
        assert info["correct"] and obs["turn"] == 2
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per episode: the next step says nothing
            env.step("garbage ((")
            env.reset(seed=0)
            env.step("garbage ((")  # a new episode that has not ended: no warning
    finally:
        env.close()


def test_executor_auto_resolves_to_what_the_machine_has(monkeypatch):
    import pkb_env.executors as executors

    for gpus, want in ((0, "cpu"), (2, "cuda"), (1, "cuda-emulated")):
        monkeypatch.setattr(executors, "gpu_count", lambda gpus=gpus: gpus)
        assert executors.resolve_executor("auto", 2) == want
    monkeypatch.undo()
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=2, executor="auto",
                         config=FAST)
    try:
        _, info = env.reset(seed=0)
        assert info["executor"] == executors.resolve_executor("auto", 2)
        if info["executor"] == "cpu":
            _, _, _, _, step = env.step(load_task("all_reduce").reference_source)
            assert step["correct"], step["feedback"]
    finally:
        env.close()


@pytest.mark.parametrize("kwargs, match", [
    ({"task": "no_such_task"}, "unknown task 'no_such_task'"),
    ({"task": "all_reduce", "world_size": 0}, "world_size must be a positive integer"),
    ({"task": "all_reduce", "preset": "huge"}, "no preset 'huge'"),
    ({"task": "all_reduce", "dtype": "int8"}, "does not take dtype"),
    ({"task": []}, "task list is empty"),
    ({"task": "all_reduce", "max_turns": 0}, "max_turns"),
    ({"task": "all_reduce", "reward": "nope"}, "nope"),
    ({"task": "magi1_cso_async_attention", "preset": "bench", "world_size": 4},
     "more than a reference on CPU ranks can do .* executor 'cuda'"),
    ({"task": "magi1_cso_async_attention", "preset": "bench", "world_size": 2},
     "would return 506 MiB per rank and call in bfloat16, more than the judge accepts"),
    ({"task": "rope_allgather", "preset": "large", "world_size": 2, "dtype": "float32"},
     "512 MiB .* use more ranks, a 16-bit dtype or a smaller preset"),
])
def test_bad_config_names_the_problem(kwargs, match):
    with pytest.raises((TaskError, ValueError), match=match):
        env = gymnasium.make("pkb_env/ParallelKernel-v0", executor="cpu", **kwargs)
        env.reset(seed=0)
        env.close()


def test_the_whole_suite_on_cpu_ranks_leaves_out_what_their_reference_cannot_run():
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task=None, world_size=2, executor="cpu", preset="bench")
    try:
        pool = env.unwrapped.task_pool
        assert "magi1_cso_async_attention" not in pool and "ring_attention" in pool and len(pool) > 30
    finally:
        env.close()


def test_bad_executor_and_reset_option():
    with pytest.raises(ValueError, match="unknown executor"):
        gymnasium.make("pkb_env/ParallelKernel-v0", executor="tpu")
    env = make_env(world_size=2)
    try:
        with pytest.raises(ValueError, match="unknown reset options"):
            env.reset(options={"taks": "all_reduce"})
        with pytest.raises(TaskError, match="unknown task"):
            env.reset(options={"task": "nope"})
    finally:
        env.close()


def test_step_before_reset():
    env = make_env(world_size=2)
    try:
        with pytest.raises(RuntimeError, match="reset"):
            env.unwrapped.step("x")
    finally:
        env.close()
