"""Training against the env: the GRPO sanity run, vector envs, the TRL reward function, a tiny TRL GRPOTrainer run.

Vectorising an env that owns rank processes (`gymnasium.make_vec`), and its limits:
  * each sub-env owns its own executor, so num_envs x world_size rank processes (plus each env's
    reference rank set) run at once; nothing is shared between sub-envs;
  * "sync" steps the sub-envs one after the other in this process; "async" puts each sub-env in a
    subprocess of its own, which then starts its rank processes (a process tree two levels deep);
  * CPU cores are shared by every rank of every sub-env (and by the policy): timings interfere, so
    speedups measured under a vector env are noisier and biased; on GPUs, prefer one env per GPU node
    (or per disjoint set of GPUs) and scale out with more nodes, not more sub-envs;
  * AsyncVectorEnv's default shared memory does not work for Text observations in gymnasium 1.4: it
    reads them once, when the vector env is built, so every obs["prompt"], obs["reference"] ... stays
    that first (empty, all-'\\t') value. Pass vector_kwargs={"shared_memory": False} (as here).
close() must leave no process behind: the tests check the children of this test process.
"""
from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
import time

import gymnasium
import numpy as np
import psutil
import pytest

import pkb_env
from conftest import FAST
from pkb_env.task import load_task
from pkb_env.agents.messages import completion_text
from pkb_env.entrypoints.trl import make_trl_reward

REFERENCE = load_task("all_reduce").reference_source


def new_children(before: set[int], wait_s: float = 15.0) -> list[psutil.Process]:
    """Children of this process (recursively) not present in `before`, after waiting up to wait_s for them to go."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# ---- (a) the GRPO sanity run -------------------------------------------------------------------------------
@pytest.mark.slow
def test_grpo_sanity_run_raises_reward_and_best_choice(tmp_path):
    """`--sanity`: 4 fixed programs picked by one token, judged by the real env; 8 updates must learn A (P(A) 0.23 -> 0.95 with seed 1)."""
    steps = 8
    cmd = [sys.executable, "-m", "pkb_env.agents.train_grpo", "--tiny", "--sanity", "--steps", str(steps),
           "--seed", "1", "--group-size", "8", "--log-dir", str(tmp_path), "--checkpoint-dir", str(tmp_path / "ckpt"),
           "--checkpoint-every", str(steps)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SANITY TASK (not kernel writing)" in proc.stdout
    (run_dir,) = [d for d in tmp_path.iterdir() if d.name.startswith("pkb_env_ParallelKernel-v0__grpo_sanity__1__")]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    initial, updates = rows[0], rows[1:]
    assert initial["step"] == 0 and len(updates) == steps
    for key in ("reward/mean", "reward/std", "env/frac_correct", "losses/loss", "losses/approx_kl", "losses/clipfrac",
                "losses/grad_norm", "perf/gen_tokens_per_s", "perf/env_steps_per_s", "time/judge_s", "sanity/p_best"):
        assert key in updates[-1], key
    first = np.mean([r["reward/mean"] for r in updates[:3]])
    last = np.mean([r["reward/mean"] for r in updates[-3:]])
    p_before, p_after = initial["sanity/p_best"], updates[-1]["sanity/p_best"]
    summary = f"reward first3 {first:+.3f} last3 {last:+.3f}; P(A) {p_before:.3f} -> {p_after:.3f}; wall {wall:.0f}s"
    print(summary)
    assert last > first + 0.2, summary
    assert p_after > p_before + 0.3 and p_after > 0.6, summary
    assert updates[-1]["env/frac_correct"] >= 0.75, summary
    saved = tmp_path / "ckpt" / run_dir.name / f"step_{steps}"
    assert (saved / "config.json").exists() and (saved / "tokenizer.json").exists()


# ---- (b) gymnasium vector envs (before the judge of (c) starts: they count new processes) -----------------------
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_reset_step_close(mode):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    vector_kwargs = {"shared_memory": False} if mode == "async" else {}
    envs = gymnasium.make_vec(pkb_env.ENV_ID, num_envs=2, vectorization_mode=mode, vector_kwargs=vector_kwargs,
                              task="all_reduce", world_size=2, executor="cpu", config=FAST, max_turns=4)
    try:
        obs, infos = envs.reset(seed=0)
        assert list(obs["task_id"]) == ["all_reduce", "all_reduce"]
        assert obs["reference"][0] == REFERENCE and REFERENCE in obs["prompt"][1]
        assert list(infos["task"]) == ["all_reduce", "all_reduce"]
        obs, rewards, terminated, truncated, infos = envs.step((REFERENCE, "garbage (("))
        assert rewards.shape == (2,) and rewards[0] > 0 and rewards[1] == pytest.approx(-0.8), rewards
        assert list(infos["correct"]) == [True, False]
        assert list(infos["verdict"]) == ["correct", "unparsable"]
        assert not truncated.any() and not terminated[1]
        assert list(obs["turn"]) == [1, 1] and obs["feedback"][1]
        assert new_children(before, wait_s=0), "the sub-envs' rank processes should be running"
    finally:
        envs.close()
    left = new_children(before)
    assert not left, f"processes left after close(): {[(p.pid, p.name(), p.cmdline()[:4]) for p in left]}"


# ---- (c) the TRL reward function ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trl_reward():
    """One TRL reward function (and so one judge, started at its first call) for the tests below that judge
    at FAST on 2 CPU ranks; close() must drop the judge."""
    reward = make_trl_reward(FAST.replace(world_size=2, executor="cpu"))
    try:
        yield reward
    finally:
        reward.close()
    assert reward.client is None


def test_trl_reward_function_returns_env_rewards(trl_reward):
    reward = trl_reward
    fenced = [{"role": "assistant", "content": f"Here it is:\n```python\n{REFERENCE}```\n"}]
    completions = [REFERENCE, "this is not python ((", fenced, load_task("all_gather").reference_source]
    rewards = reward(prompts=["p"] * 4, completions=completions,
                     task=["all_reduce", "all_reduce", "all_reduce", "all_gather"], completion_ids=[[]] * 4)
    assert len(rewards) == 4 and all(isinstance(r, float) for r in rewards)
    assert rewards[0] > 0 and rewards[2] > 0 and rewards[3] > 0, rewards
    assert rewards[1] < 0, rewards
    assert [i["correct"] for i in reward.last_infos] == [True, False, True, True]
    assert reward.last_infos[1]["verdict"] == "unparsable"
    copy = pickle.loads(pickle.dumps(reward))  # the judge (rank processes) does not travel; its config does
    assert copy.client is None and copy.config == reward.config
    with pytest.raises(ValueError, match="task"):
        reward(prompts=["p"], completions=["x", "y"], task=["all_reduce"])


def test_trl_reward_refuses_rows_without_a_task():
    """Without a task column and without one task given, nothing is judged (it used to judge all_reduce)."""
    reward = make_trl_reward(FAST.replace(world_size=2, executor="cpu"))
    try:
        broadcast = load_task("broadcast").reference_source
        with pytest.raises(ValueError, match="no task for the completions.*'task' column.*make_trl_reward"):
            reward(prompts=["p"], completions=[broadcast], problem=["broadcast"])
        assert reward.client is None  # refused before any rank process started
    finally:
        reward.close()


def test_trl_reward_takes_task_id_and_a_single_task(trl_reward):
    reward = trl_reward
    fixed = make_trl_reward({"task": "broadcast", "world_size": 2, "executor": "cpu", "trials": 2, "trial_timeout_s": 6.0,
                             "protocol": dataclasses.asdict(FAST.protocol)})   # the tests' short timing protocol
    broadcast = load_task("broadcast").reference_source
    try:
        assert reward(prompts=["p"], completions=[broadcast], task_id=["broadcast"])[0] > 0
        assert reward.last_infos[0]["correct"] and reward.last_infos[0]["verdict"] == "correct"
        assert fixed(prompts=["p"], completions=[broadcast])[0] > 0 and fixed.last_infos[0]["correct"]
    finally:
        fixed.close()


def test_completion_text_shapes():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "abc"}]) == "abc"
    assert completion_text({"role": "assistant", "content": "abc"}) == "abc"
    with pytest.raises(TypeError, match="str or a list"):
        completion_text(3)


# ---- (d) a tiny TRL GRPOTrainer run ------------------------------------------------------------------------
def test_trl_grpo_trainer_two_steps(tmp_path, trl_reward):
    import datasets  # installed with trl (the dev and train extras)
    import trl

    from pkb_env.agents.train_grpo import make_tiny_model, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(tokenizer, seed=0)
    tasks = ["all_reduce", "all_gather", "all_reduce", "broadcast"]
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"Write {t} for 2 ranks."}], "task": t}
                                          for t in tasks])
    reward = trl_reward
    config = trl.GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                            max_completion_length=8, use_cpu=True, report_to=[], logging_steps=1,
                            save_strategy="no", seed=0)
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[reward],
                              train_dataset=dataset, args=config)
    result = trainer.train()
    assert result.global_step == 2
    logged = [h for h in trainer.state.log_history if "rewards/pkb_env/mean" in h]
    assert len(logged) == 2
    # a random model writes no solution: the env says unparsable (-0.8), not an error in the plumbing
    assert all(-1.0 <= h["rewards/pkb_env/mean"] <= 1.0 for h in logged)
    assert "pkb_env/frac_correct" in logged[-1]
