"""The Ray judge pool (pkb_env/pool/, docs/scale_out.md) on a real local Ray cluster with CPU judges at world
size 2: the verdicts local judging gives, a killed actor, a batch deadline, backpressure, the VectorEnv, the
TRL reward and `evaluate` over the pool, and nothing left running at close.

One cluster and one pool of two actors serve the module (each actor starts a JudgeService: seconds); the last
test closes that pool."""
from __future__ import annotations

import asyncio
import glob
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

ray = pytest.importorskip("ray")

from conftest import FAST, scratch, still_alive  # noqa: E402
from pkb_env import JudgeService  # noqa: E402
from pkb_env.errors import PoolError  # noqa: E402
from pkb_env.entrypoints.gym import RayVectorEnv  # noqa: E402
from pkb_env.pool import JudgePool  # noqa: E402
from pkb_env.record import EvaluationRecord, Verdict  # noqa: E402
from pkb_env.rewards import load_reward  # noqa: E402
from pkb_env.task import TaskError  # noqa: E402

RING = open(os.path.join(os.path.dirname(__file__), "..", "..", "solutions", "examples", "all_reduce_ring.py")).read()
WRONG = "def solution(tensor):\n    return tensor.clone()\n"
HANGS = "import time\ndef solution(tensor):\n    time.sleep(600)\n    return tensor\n"
CRASHES = "import os\ndef solution(tensor):\n    os._exit(3)\n"
# correct, its first call 4 s late: long enough to be killed in, short of every timeout
SLOW = RING + "\n\nimport time\n_ring, _calls = solution, [0]\n\n\ndef solution(tensor):\n    _calls[0] += 1\n" \
              "    if _calls[0] == 1:\n        time.sleep(4)\n    return _ring(tensor)\n"
CONFIG = FAST.replace(executor="cpu", world_size=2)


# The actors' $TMPDIR: their executors' pkb-env-* folders land here, apart from other judges on the machine, so that
# what the pool leaves behind can be counted.
ACTOR_TMP = scratch("pkb-pool-tmp-")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TMPDIR": ACTOR_TMP}})
    yield
    ray.shutdown()
    shutil.rmtree(ACTOR_TMP, ignore_errors=True)


@pytest.fixture(scope="module")
def pool(cluster):
    with JudgePool(CONFIG, address="auto", actors=2, cpus_per_actor=1) as pool:
        yield pool


def _correct(pool, record) -> None:
    """Assert `record` is correct, showing what it was instead and what the pool had done (a bare `assert False`
    told nothing of a failure seen once under load)."""
    assert record.correct, (f"{record.task}: {record.verdict.value}: {record.error}\nfeedback: {record.feedback}\n"
                            f"pool: {pool.stats()}\nactors: {pool.health()}")


def _folders(at_most: int, wait_s: float) -> list[str]:
    """The pkb-env-* folders of the pool's actors, once there are `at_most` or fewer (or after `wait_s`): a judge
    that died removes its own shortly after (its zygote, told as its parent dies: pkb_env/sandbox/zygote.py)."""
    end = time.monotonic() + wait_s
    while True:
        found = sorted(glob.glob(os.path.join(ACTOR_TMP, "pkb-env-*")))
        if len(found) <= at_most or time.monotonic() > end:
            return found
        time.sleep(0.2)


def _judged(pool, batch):
    return [(r.task, r.verdict) for r in pool.map(batch, deadline_s=120)]


def test_a_mixed_batch_gets_the_verdicts_local_judging_gives(pool):
    batch = [("all_reduce", RING), ("all_reduce", WRONG), ("all_reduce", HANGS), ("all_reduce", CRASHES),
             ("all_gather", WRONG), ("broadcast", "not python at all (")]
    with ThreadPoolExecutor(1) as driver:   # the pool judges the batch while this process judges it too
        judging = driver.submit(_judged, pool, batch)
        with JudgeService(CONFIG) as judge:
            here = [(task, judge.judge(task, code).verdict) for task, code in batch]
        on_pool = judging.result()
    assert on_pool == here
    assert [v for _, v in on_pool] == [Verdict.CORRECT, Verdict.WRONG, Verdict.RUNTIME_ERROR, Verdict.RUNTIME_ERROR,
                                       Verdict.WRONG, Verdict.UNPARSABLE]
    assert {answer["executor"] for answer in pool.started} == {"cpu"}


def test_records_arrive_as_they_finish_and_equal_their_futures(pool):
    futures = [pool.submit("all_reduce", SLOW), pool.submit("all_reduce", RING)]
    order = list(pool.as_completed(futures, deadline_s=60))
    assert [r.verdict for r in order] == [Verdict.CORRECT, Verdict.CORRECT]
    assert order[0] is futures[1].result()   # the fast one first, on the other actor
    assert EvaluationRecord.from_dict(order[0].to_dict()) == order[0]


def test_an_actor_killed_mid_step_costs_a_retry_not_a_verdict(pool):
    before = pool.stats()
    future = pool.submit("all_reduce", SLOW)
    busy = _wait_for(lambda: [a for a in pool.health() if a.get("busy")], 20)
    os.kill(busy[0]["pid"], signal.SIGKILL)
    record = next(pool.as_completed([future], deadline_s=90))
    after = pool.stats()
    assert record.verdict in (Verdict.CORRECT, Verdict.JUDGE_ERROR), (record.verdict, record.error, after)
    assert after["actor_deaths"] == before["actor_deaths"] + 1, (before, after)
    if record.verdict is Verdict.JUDGE_ERROR:
        assert "died" in record.error and not record.judged, (record.error, after)
    else:
        assert after["retried"] == before["retried"] + 1, (before, after)
    _correct(pool, pool.map([("all_reduce", RING)], deadline_s=120)[0])   # the pool goes on
    assert still_alive([busy[0]["pid"]], 5) == []
    assert len(_folders(pool.size, 30)) <= pool.size   # the killed judge's folder went with it


def test_a_batch_deadline_returns_on_time_and_blames_nobody(pool):
    start = time.monotonic()
    records = pool.map([("all_reduce", HANGS), ("all_reduce", RING)], deadline_s=3)
    took = time.monotonic() - start
    assert took < 3 + 8, took
    hung = records[0]
    assert hung.verdict is Verdict.JUDGE_ERROR and "deadline" in hung.error, hung.error
    assert load_reward("default")(hung).terms["scored"] == "no" and load_reward("default")(hung).value == 0.0
    _correct(pool, pool.map([("all_reduce", RING)], deadline_s=120)[0])   # its actor restarted
    # Ray killed the hung step's actor (ray.kill): its judge's folder went with it, none left behind
    assert len(_folders(pool.size, 30)) <= pool.size, (_folders(pool.size, 0), pool.stats())


def test_the_pool_records_what_it_judges_on_the_driver(pool, tmp_path):
    from pkb_env.data import EpisodeRecorder
    from pkb_env.data.reader import read_rows

    pool.recorder = recorder = EpisodeRecorder(tmp_path / "data", agent="pool-test")
    try:
        pool.map([("all_reduce", RING), ("all_gather", WRONG)], deadline_s=120)
    finally:
        pool.recorder = None
        recorder.close()
    rows = read_rows(tmp_path / "data")
    assert sorted((r["task"], r["verdict"], r["executor"]) for r in rows) == [("all_gather", "wrong", "cpu"),
                                                                          ("all_reduce", "correct", "cpu")]


def test_bad_input_is_refused_at_submit(pool):
    with pytest.raises(TaskError, match="all_reduce"):
        pool.submit("all_reduc", RING)
    with pytest.raises(TypeError, match="code must be a str"):
        pool.submit("all_reduce", b"bytes")
    with pytest.raises(ValueError, match="not submitted to this pool"):
        list(pool.as_completed([object()]))
    with pytest.raises(ValueError, match="deadline_s"):
        list(pool.as_completed([], deadline_s=-1))
    with pytest.raises(TypeError, match="pairs"):
        pool.map(["all_reduce"])


def test_a_pool_the_cluster_cannot_hold_is_refused_naming_what_it_has(cluster):
    with pytest.raises(PoolError, match=r"fit in the cluster \(1 node\(s\): 6 CPU"):
        JudgePool(CONFIG, address="auto", actors=50, cpus_per_actor=1)
    with pytest.raises(ValueError, match="actors must be a positive integer|positive integer or None"):
        JudgePool(CONFIG, address="auto", actors=0)


def test_the_trl_reward_judges_a_batch_on_the_pool(pool):
    from pkb_env.entrypoints.trl import make_trl_reward

    reward = make_trl_reward(client=pool, deadline_s=120)
    completions = [f"```python\n{RING}\n```", WRONG]
    values = reward(prompts=["p", "p"], completions=completions, task=["all_reduce", "all_reduce"])
    assert values[0] > values[1] and values[1] == load_reward("default").config["wrong"]
    with pytest.raises(ValueError, match="either config or client"):
        make_trl_reward(CONFIG, client=pool)


def test_a_grpo_trainer_takes_its_reward_from_the_pool(pool, tmp_path):
    import datasets
    import trl

    from pkb_env.agents.train_grpo import make_tiny_model, make_tiny_tokenizer
    from pkb_env.entrypoints.trl import make_trl_reward

    tokenizer = make_tiny_tokenizer()
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"Write {t} for 2 ranks."}], "task": t}
                                          for t in ["all_reduce", "all_gather", "all_reduce", "broadcast"]])
    reward = make_trl_reward(client=pool, deadline_s=300)
    config = trl.GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                            max_completion_length=8, use_cpu=True, report_to=[], logging_steps=1,
                            save_strategy="no", seed=0)
    trainer = trl.GRPOTrainer(model=make_tiny_model(tokenizer, seed=0), processing_class=tokenizer,
                              reward_funcs=[reward], train_dataset=dataset, args=config)
    submitted = pool.stats()["submitted"]
    assert trainer.train().global_step == 2
    assert pool.stats()["submitted"] - submitted == 4   # every completion judged on the pool
    logged = [h for h in trainer.state.log_history if "rewards/pkb_env/mean" in h]
    assert len(logged) == 2, trainer.state.log_history
    assert [h["rewards/pkb_env/mean"] for h in logged] == pytest.approx([-0.8, -0.8])   # a random model: unparsable


def test_evaluate_over_the_pool_writes_the_report_local_judging_writes(pool):
    from pkb_env.agents import ReferenceAgent
    from pkb_env.evaluation import evaluate

    on_pool = evaluate(ReferenceAgent(), tasks=["all_reduce", "broadcast"], samples=2, ks=(1, 2), client=pool,
                       progress=False)
    here = evaluate(ReferenceAgent(), tasks=["all_reduce", "broadcast"], samples=2, ks=(1, 2), config=CONFIG,
                    progress=False)
    assert [(r.task, r.sample, r.verdict) for r in on_pool.rows] == [(r.task, r.sample, r.verdict) for r in here.rows]
    assert on_pool.executor == here.executor == "cpu" and on_pool.world_size == 2


def test_the_vector_env_steps_its_actors_at_once_and_autoresets_next_step(cluster):
    envs = RayVectorEnv(2, config=CONFIG, address="auto", cpus_per_actor=1, task="all_reduce", max_turns=1,
                        target_speedup=0.01)
    try:
        obs, infos = envs.reset(seed=0)
        assert len(obs["prompt"]) == 2 and obs["task_id"] == ("all_reduce", "all_reduce") and infos["_task"].all()
        obs, rewards, terminated, truncated, infos = envs.step([RING, WRONG])
        assert terminated.tolist() == [True, False] and truncated.tolist() == [False, True]
        assert rewards[0] > rewards[1] and infos["verdict"].tolist() == ["correct", "wrong"]
        obs, rewards, terminated, truncated, infos = envs.step([WRONG, WRONG])   # both reset: actions ignored
        assert rewards.tolist() == [0.0, 0.0] and not terminated.any() and not truncated.any()
        assert "verdict" not in infos and obs["turn"].tolist() == [0, 0]
        pids = [p for ps in envs.pool.process_ids().values() for p in ps]
    finally:
        envs.close()
    assert still_alive(pids, 10) == []


def test_close_leaves_no_process_of_the_pool(pool):
    """The module's pool, closed here (its fixture's close() afterwards does nothing): keep this test last."""
    _correct(pool, pool.map([("all_reduce", RING)])[0])
    pids = [p for ps in pool.process_ids().values() for p in ps]
    assert len(pids) > 3   # the actor, its zygote, cells and ranks
    pending = pool.submit("all_reduce", SLOW)
    pool.close()
    assert pending.result(timeout=1).verdict in (Verdict.JUDGE_ERROR, Verdict.CORRECT)
    assert still_alive(pids, 10) == []
    assert _folders(0, 30) == []   # every judge the pool ever started removed its folder (killed ones included)
    with pytest.raises(PoolError, match="closed"):
        pool.submit("all_reduce", RING)


def _wait_for(probe, timeout_s):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"nothing within {timeout_s} s")
