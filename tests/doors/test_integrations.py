"""The trainer adapters, each driven by the trainer's own code (docs/integrations.md).

(a) verl: its RewardLoopWorker, built from verl's own ppo_trainer config (hydra compose, as main_ppo does)
    with `reward.custom_reward_function` pointing at pkb_env.entrypoints.verl, scores a tokenized batch of
    8 completions through verl's naive reward manager; (b) SkyRL: `skyrl_gym.make("pkb_env", ...)` driven
    through multi-turn episodes; (c) bad rows and settings refused with the fix. One judge client for the
    module: every call uses the same judge settings, so shared_client keeps one (closed at the end); the last
    test judges two responses of verl's reward on a JudgePool of one actor on a local Ray cluster.
verl is the `[verl]` extra, not in `[dev]` (its install pins transformers and takes over a minute): its
tests skip where it is not installed.
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import FAST
from pkb_env import shared as clients
from pkb_env.config import ConfigError
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import load_reward
from pkb_env.task import TaskError, load_task

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = load_task("all_reduce").reference_source
WRONG = "def solution(tensor):\n    return tensor.clone()\n"
RAISES = "def solution(tensor):\n    raise RuntimeError('not yet')\n"
HANGS = "import time\ndef solution(tensor):\n    time.sleep(600)\n    return tensor\n"
# FAST as plain data, as a trainer's YAML carries it (reward_kwargs, env_config)
JUDGE = {"executor": "cpu", "world_size": 2, "trials": FAST.trials, "trial_timeout_s": FAST.trial_timeout_s,
         "build_timeout_s": FAST.build_timeout_s, "timing_timeout_s": FAST.timing_timeout_s,
         "protocol": dataclasses.asdict(FAST.protocol)}
SHAPED = load_reward("default").config


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\n"


@pytest.fixture(scope="module", autouse=True)
def one_judge():
    yield
    clients.close_shared()


def test_settings_are_the_conftest_judge():
    """The plain settings above are FAST at world size 2: one judge serves every test here."""
    from pkb_env.settings import read_settings

    assert read_settings(JUDGE, "test", {}).config == FAST.replace(executor="cpu", world_size=2)


# ---- (a) verl ----------------------------------------------------------------------------------------------
def make_dataset_module():
    spec = importlib.util.spec_from_file_location("make_dataset", ROOT / "examples" / "verl" / "make_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def verl_worker(tmp_path_factory):
    """verl's reward loop worker as its trainer makes it: verl's config, its tokenizer loader, its reward manager."""
    pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir

    from pkb_env.agents.train_grpo import make_tiny_tokenizer
    from verl.experimental.reward_loop import RewardLoopWorker

    tokenizer_dir = tmp_path_factory.mktemp("tokenizer")
    make_tiny_tokenizer().save_pretrained(tokenizer_dir)
    # examples/verl/pkb_grpo.yaml as a user runs it, its judge moved to CPU ranks and conftest's FAST settings
    overrides = [f"actor_rollout_ref.model.path={tokenizer_dir}"]
    kwargs = "reward.custom_reward_function.reward_kwargs"
    flat = {f"{k}.{kk}": vv for k, v in JUDGE.items() if isinstance(v, dict) for kk, vv in v.items()}
    flat.update({k: v for k, v in JUDGE.items() if not isinstance(v, dict)})
    overrides += [f"{'' if k in ('executor', 'world_size') else '+'}{kwargs}.{k}={v}" for k, v in flat.items()]
    overrides += [f"{kwargs}.preset=tiny"]
    with initialize_config_dir(config_dir=str(ROOT / "examples" / "verl"), version_base=None):
        config = compose("pkb_grpo", overrides=overrides)
    assert config.reward.custom_reward_function.path == "pkg://pkb_env.entrypoints.verl"
    assert config.reward.reward_manager.name == "naive" and config.algorithm.adv_estimator == "grpo"
    return RewardLoopWorker(config)


def verl_batch(tokenizer, row: dict, completions: list[str]):
    """A DataProto as verl's rollout leaves it: prompt ids left-padded, response ids right-padded, the row's
    non-tensor columns repeated per sample."""
    import torch

    from verl import DataProto

    prompt = tokenizer.apply_chat_template(list(row["raw_prompt"]), add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-64:]
    responses = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in completions]
    width = max(map(len, responses))
    pad = tokenizer.pad_token_id
    response_ids = torch.tensor([r + [pad] * (width - len(r)) for r in responses])
    response_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses])
    prompts = torch.tensor([prompt_ids] * len(completions))
    attention = torch.cat([torch.ones_like(prompts), response_mask], dim=1)
    n = len(completions)
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": response_ids, "attention_mask": attention,
                 "input_ids": torch.cat([prompts, response_ids], dim=1)},
        non_tensors={"data_source": np.array([row["data_source"]] * n, dtype=object),
                     "reward_model": np.array([dict(row["reward_model"]) for _ in range(n)], dtype=object),
                     "extra_info": np.array([dict(row["extra_info"]) for _ in range(n)], dtype=object)})


@pytest.mark.timeout(240)
def test_verl_reward_loop_scores_a_batch_with_the_same_keys(verl_worker, tmp_path):
    """verl's worker (naive reward manager, concurrent coroutines) scores 8 completions of a make_dataset row,
    read back by verl's own RLHFDataset."""
    from omegaconf import OmegaConf

    from verl.utils.dataset.rl_dataset import RLHFDataset

    path = make_dataset_module().main(["--executor", "cpu", "--world-size", "2", "--tasks", "all_reduce",
                                       "--out", str(tmp_path)])
    dataset = RLHFDataset([str(path)], verl_worker.input_tokenizer,
                          OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 1 << 20,
                                            "cache_dir": str(tmp_path / "cache")}))
    row = dataset[0]
    assert row["extra_info"]["task"] == "all_reduce" and row["data_source"] == "pkb_env"
    outcomes = {"correct": [fenced(REFERENCE), REFERENCE], "wrong": [fenced(WRONG), WRONG],
                "unparsable": ["I would use a ring.", "```python\ndef solution(tensor:\n```"],
                "runtime_error": [fenced(RAISES), fenced(HANGS)]}
    completions = [c for group in outcomes.values() for c in group]
    tokenizer = verl_worker.input_tokenizer
    assert [tokenizer.decode(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions] == completions
    # the loop verl bound the worker and its reward manager to (a Ray actor runs its async methods on it)
    outputs = verl_worker.loop.run_until_complete(verl_worker.compute_score_batch(verl_batch(tokenizer, row, completions)))
    infos = [o["reward_extra_info"] for o in outputs]
    for o, info, completion in zip(outputs, infos, completions):
        print(f"{info['verdict']:>13} score={o['reward_score']:+.3f} speedup={info['speedup']} "
              f"judged={info['judged']} keys={sorted(info)} | {completion[:30]!r}")
    assert all(set(info) == set(infos[0]) for info in infos)                 # verl's agent loop needs this
    assert set(infos[0]) >= {"score", "correct", "speedup", "roofline_fraction", "verdict"}
    assert all(o["reward_score"] == info["score"] for o, info in zip(outputs, infos))
    got = {name: [info for info in infos[i:i + 2]] for i, name in zip(range(0, 8, 2), outcomes)}
    assert all(info["verdict"] == name for name, group in got.items() for info in group), got
    scores = {name: [info["score"] for info in group] for name, group in got.items()}
    assert min(scores["correct"]) >= SHAPED["correct_base"] > max(scores["wrong"])
    assert scores["wrong"] == [SHAPED["wrong"]] * 2
    assert scores["runtime_error"] == [SHAPED["runtime_error"]] * 2
    assert scores["unparsable"] == [SHAPED["unparsable"]] * 2
    assert "did not finish trials within trial_timeout_s" in infos[7]["error"], infos[7]["error"]   # the hang
    assert all(info["judged"] == 1.0 and info["task"] == "all_reduce" for info in infos)
    assert [info["correct"] for info in infos] == [1.0, 1.0] + [0.0] * 6


def test_verl_judge_error_keeps_the_keys():
    """A step the judge could not judge scores the reward's unjudged 0 under the same keys, judged 0.0."""
    from pkb_env.entrypoints.verl import KEYS, score_of

    record = EvaluationRecord.unjudged("all_reduce", 2, "tiny", "float32", "cpu", "h", "the pool lost its actor")
    result = score_of(record, load_reward("default"))
    assert tuple(result) == KEYS
    assert result["score"] == 0.0 and result["judged"] == 0.0 and result["verdict"] == "judge_error"
    assert "lost its actor" in result["error"]


def test_verl_bad_rows_and_settings_name_the_fix():
    from pkb_env.entrypoints.verl import compute_score

    def score(ground_truth="", extra_info=None, **kwargs):
        return asyncio.run(compute_score("pkb_env", REFERENCE, ground_truth, extra_info, **{**JUDGE, **kwargs}))

    with pytest.raises(TaskError, match="all_reduce"):            # the message lists the known tasks
        score(extra_info={"task": "all_reduse"})
    with pytest.raises(ValueError, match=r"extra_info\.task"):
        score(extra_info={"index": 3})
    with pytest.raises(ValueError, match="does not parse"):
        score('{"task": "all_reduce"')
    with pytest.raises(ConfigError, match=r"reward_kwargs.*did you mean 'world_size'"):
        score("all_reduce", wrld_size=2)
    with pytest.raises(ConfigError, match="world_size must be a positive integer"):
        score("all_reduce", world_size="two")
    with pytest.raises(ConfigError, match=r"reward: unknown reward config 'shapd'.*available"):
        score("all_reduce", reward="shapd")
    with pytest.raises(TaskError, match="no preset 'huge'; choose one of"):     # a row's override
        score(json.dumps({"task": "all_reduce", "preset": "huge"}))
    with pytest.raises(ValueError, match="world size 100000 is more than the cpu executor can run"):
        score("all_reduce", {"world_size": 100000})
    with pytest.raises(TypeError, match="decoded response"):
        asyncio.run(compute_score("pkb_env", None, "all_reduce", None, **JUDGE))


def test_verl_ground_truth_json_and_row_overrides():
    """The row's JSON target and extra_info override reward_kwargs; the task may come from ground_truth."""
    from pkb_env.entrypoints.verl import row_target

    target = json.dumps({"task": "all_gather", "preset": "tiny", "dtype": "float32", "world_size": 4})
    assert row_target(target, None) == ("all_gather", {"preset": "tiny", "dtype": "float32", "world_size": 4})
    task, row = row_target(target, {"task": "all_reduce", "world_size": np.int32(2), "executor": None,
                                    "num_turns": None})
    assert task == "all_reduce" and row["world_size"] == 2 and type(row["world_size"]) is int
    assert "executor" not in row and "num_turns" not in row


# ---- (b) SkyRL ---------------------------------------------------------------------------------------------
def make_env(env_config: dict, extras: dict):
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from omegaconf import OmegaConf

    import pkb_env.entrypoints.skyrl  # noqa: F401  (registers "pkb_env")
    return skyrl_gym.make("pkb_env", env_config=OmegaConf.create(env_config), extras=extras)


@pytest.mark.timeout(180)
def test_skyrl_multi_turn_episode_feeds_back_and_ends_when_correct():
    env = make_env({**JUDGE, "max_turns": 4, "target_speedup": 0.0}, {"task": "all_reduce", "reward_spec": {}})
    chat, info = env.init([])
    assert chat[0]["role"] == "user" and "all_reduce" in chat[0]["content"] and info["world_size"] == 2
    turns = [env.step(fenced(WRONG)), env.step(fenced(RAISES)), env.step(fenced(REFERENCE))]
    for i, out in enumerate(turns, 1):
        seen = out["observations"][0]["content"][:160] if out["observations"] else "(none)"
        print(f"turn {i}: reward={out['reward']:+.3f} done={out['done']} verdict={out['metadata']['verdict']} "
              f"next observation: {seen!r}")
    wrong, raised, correct = turns
    assert (wrong["reward"], raised["reward"]) == (SHAPED["wrong"], SHAPED["runtime_error"])
    assert not wrong["done"] and not raised["done"] and correct["done"]
    for out in (wrong, raised):   # the judge's feedback on this turn is the next user message, alone
        (message,) = out["observations"]
        assert message["role"] == "user"
        assert out["metadata"]["feedback"] and out["metadata"]["feedback"] in message["content"]
        assert message["content"].startswith(f"## Result of your previous attempt (turn {out['metadata']['turn']})")
        assert "## Reference implementation" not in message["content"]
    assert "not yet" in raised["observations"][0]["content"]
    assert correct["observations"] == [] and correct["metadata"]["correct"] and correct["reward"] >= SHAPED["correct_base"]
    solved = env.get_metrics()
    assert solved["turns"] == 3 and solved["solved"] == 1.0 and solved["judge_errors"] == 0

    # skyrl-train's generator puts its max_turns in the extras: it wins over env_config's
    short = make_env({**JUDGE, "max_turns": 5}, {"extra_info": {"task": "all_reduce"}, "max_turns": 2})
    short.init([{"role": "user", "content": "from the dataset"}])
    first, second = short.step("no code"), short.step("still none")
    assert not first["done"] and second["done"] and second["metadata"]["verdict"] == "unparsable"
    with pytest.raises(RuntimeError, match="episode is over"):
        short.step("again")
    summary = type(env).aggregate_metrics([solved, short.get_metrics()])
    print("metrics", solved, short.get_metrics(), "aggregate", summary)
    assert summary["solve_rate"] == 0.5 and summary["mean_turns"] == 2.5
    assert env.client is short.client and len(clients._clients) == 1   # one judge for the module, verl's rows too


def test_skyrl_bad_settings_name_the_fix():
    with pytest.raises(ValueError, match=r"'task' column \(or extra_info\.task\)"):
        make_env(JUDGE, {"reward_spec": {"ground_truth": "x"}, "extra_info": {"split": "train"}})
    with pytest.raises(TaskError, match="all_reduce"):
        make_env(JUDGE, {"task": "all_reduse"})
    with pytest.raises(ConfigError, match=r"env_config.*did you mean 'world_size'.*max_turns"):
        make_env({**JUDGE, "wrld_size": 2}, {"task": "all_reduce"})
    with pytest.raises(ValueError, match=r"max_turns \(env_config.s.*must be a positive integer"):
        make_env({**JUDGE, "max_turns": 0}, {"task": "all_reduce"})


def test_skyrl_without_skyrl_gym_names_the_extra(monkeypatch):
    import importlib
    import sys

    from pkb_env.extras import MissingExtra

    monkeypatch.setitem(sys.modules, "skyrl_gym", None)
    monkeypatch.delitem(sys.modules, "pkb_env.entrypoints.skyrl", raising=False)
    with pytest.raises(MissingExtra, match=r"PkbTextEnv\) needs the 'skyrl_gym' package.*pkb-env\[skyrl\]"):
        importlib.import_module("pkb_env.entrypoints.skyrl")


@pytest.mark.timeout(240)
def test_verl_reward_on_a_judge_pool():
    """reward_kwargs.pool_address: the samples go to a JudgePool on the Ray cluster there (one actor here)."""
    ray = pytest.importorskip("ray")
    from pkb_env.entrypoints.verl import compute_score

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        async def batch():
            calls = [compute_score("pkb_env", code, "all_reduce", {"num_turns": None}, pool_address="auto",
                                   pool_actors=1, **JUDGE) for code in (fenced(REFERENCE), WRONG)]
            return await asyncio.gather(*calls)

        correct, wrong = asyncio.run(batch())
        print("pool:", correct, wrong)
        assert (correct["verdict"], wrong["verdict"]) == ("correct", "wrong") and set(correct) == set(wrong)
        assert correct["score"] >= SHAPED["correct_base"] and wrong["score"] == SHAPED["wrong"]
        (pool,) = [c for key, c in clients._clients.items() if key[1] == "auto"]
        assert pool.size == 1 and pool.stats()["judged"] == 2, pool.stats()
    finally:
        clients.close_shared()      # the pool's actors stop before the cluster does
        ray.shutdown()


# ---- (d) verifiers -----------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_vf_eval_runs_a_multi_turn_episode_with_a_replayed_model(tmp_path):
    """verifiers' own `vf-eval` on the pkb_env_vf environment (environments/pkb_env_vf on PYTHONPATH, as an
    install would put it), its default harness (PkbChat: verifiers' plain chat, run as a local process) talking to examples/verifiers/replay_model.py on loopback: three
    replies (unparsable, wrong, the reference), the judge's feedback between them, the rubric's reward last."""
    pytest.importorskip("verifiers.v1")
    import os
    import shutil
    import socket
    import subprocess
    import sys

    if shutil.which("uv") is None:
        pytest.skip("verifiers' null harness runs its chat program with uv (the verifiers extra installs it)")
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["I would use a ring.", fenced(WRONG), fenced(REFERENCE)]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model_log = open(tmp_path / "model.log", "w+")
    model = subprocess.Popen([sys.executable, str(ROOT / "examples" / "verifiers" / "replay_model.py"), "--port",
                              str(port), str(replies)], stdout=model_log, stderr=subprocess.STDOUT)
    env = {**os.environ, "OPENAI_API_KEY": "replay",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "environments" / "pkb_env_vf"), os.environ.get("PYTHONPATH", "")])}
    judge = ["--env.taskset.task.judge-settings", json.dumps({k: v for k, v in JUDGE.items()
                                                               if k not in ("executor", "world_size")})]
    try:
        run = subprocess.run([str(Path(sys.executable).parent / "vf-eval"), "pkb_env_vf", "-m", "replay",
                              "--client.base-url", f"http://127.0.0.1:{port}/v1", "--client.api-key-var",
                              "OPENAI_API_KEY", "--env.taskset.tasks", '["all_reduce"]', "--env.taskset.task.executor",
                              "cpu", "--env.taskset.task.world-size", "2", "--env.taskset.task.target-speedup", "0",
                              *judge, "--no-push", "--no-rich", "-n", "1", "-o", str(tmp_path / "out")],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    finally:
        model.terminate()
        model.wait(10)
    model_log.seek(0)
    seen = model_log.read()
    done = [line for line in run.stdout.splitlines() + run.stderr.splitlines() if "rollout done" in line]
    print(seen[-900:], *done, sep="\n")
    assert run.returncode == 0, run.stderr[-3000:]
    (trace_file,) = (tmp_path / "out").glob("*/traces.jsonl")
    (episode,) = [json.loads(line) for line in trace_file.read_text().splitlines()]
    (trace,) = episode["traces"]
    score = trace["rewards"]["pkb_reward"]["score"]
    assert score >= SHAPED["correct_base"] and "turns=3" in done[0]
    # the model saw the task, then the judge's feedback on each wrong reply as the next user message
    assert "# Task: All-reduce" in seen and "Result of your previous attempt (turn 1)" in seen
    assert "Result of your previous attempt (turn 2)" in seen and "WRONG" in seen


def test_verifiers_load_environment_takes_the_settings_as_keywords(monkeypatch):
    pytest.importorskip("verifiers.v1")
    monkeypatch.syspath_prepend(str(ROOT / "environments" / "pkb_env_vf"))
    from pkb_env.entrypoints.verifiers import PkbEnv, load_environment

    settings = {k: v for k, v in JUDGE.items() if k not in ("executor", "world_size")}
    env = load_environment(task=["all_reduce", "all_gather"], world_size=2, executor="cpu", max_turns=3, **settings)
    assert isinstance(env, PkbEnv) and env.config.agent.runtime.type == "subprocess"
    tasks = list(env.taskset.load())
    assert [t.data.task for t in tasks] == ["all_reduce", "all_gather"] and "# Task: All-reduce" in tasks[0].data.prompt
    assert tasks[0].config.judge_config() == FAST.replace(executor="cpu", world_size=2)   # the module's one judge
    with pytest.raises(TaskError, match="did you mean 'all_reduce'"):
        list(load_environment(task="all_reduse", world_size=2, executor="cpu", **settings).taskset.load())


@pytest.mark.parametrize("module, package, extra", [("pkb_env.entrypoints.openenv", "openenv", "openenv"),
                                                    ("pkb_env.entrypoints.verifiers", "verifiers", "verifiers")])
def test_openenv_and_verifiers_without_their_package_name_the_extra(monkeypatch, module, package, extra):
    import importlib
    import sys

    from pkb_env.extras import MissingExtra

    for name in [package] + [m for m in sys.modules if m.startswith(package + ".")]:   # imported by earlier tests
        monkeypatch.setitem(sys.modules, name, None)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingExtra, match=rf"needs the '{package}' package.*pkb-env\[{extra}\]"):
        importlib.import_module(module)
