"""A batch on verdicts-only lanes (JudgeConfig.verify_lanes, pkb_env/lanes.py): the verdicts a client without lanes
gives, in order; the correct candidates timed on the client's own judge after every other candidate is decided;
each step recorded once; nothing left running after close."""
from __future__ import annotations

import asyncio

import psutil
import pytest

from conftest import FAST, still_alive
from pkb_env import LocalClient
from pkb_env.config import ConfigError, JudgeConfig
from pkb_env.task import load_task

REDUCE = load_task("all_reduce").reference_source
GATHER = load_task("all_gather").reference_source
RAISES = "def solution(tensor):\n    raise RuntimeError('no kernel yet')\n"
BATCH = [("all_reduce", "this is not python ("), ("all_reduce", REDUCE), ("all_reduce", RAISES),
         ("all_gather", GATHER), ("all_reduce", "def solution(tensor):\n    return tensor.clone()\n")]
EXPECTED = ["unparsable", "correct", "runtime_error", "correct", "wrong"]


class Rows:
    """A recorder (JudgeService's hook: `record(record, completion, prompt, config=..., topology=...)`)."""

    def __init__(self):
        self.rows = []

    def record(self, record, completion, prompt, config=None, topology=None):
        self.rows.append((record.task, record.verdict.value, completion))


@pytest.fixture(scope="module")
def laned():
    rows = Rows()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    client = LocalClient(FAST.replace(executor="cpu", world_size=2, verify_lanes=2), recorder=rows)
    yield client, rows
    client.close()
    after = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not still_alive(after, 10.0), "processes of the client or its lanes outlived close()"


def test_a_batch_on_lanes_gets_its_verdicts_in_order_and_times_only_the_correct(laned):
    client, rows = laned
    done_order = []
    futures = client.submit_many(BATCH)
    for index, future in enumerate(futures):
        future.add_done_callback(lambda _, index=index: done_order.append(index))
    records = [f.result(timeout=300) for f in futures]
    assert [r.verdict.value for r in records] == EXPECTED, [(r.feedback[:300], [f.message for f in r.flags]) for r in records]
    for record in records:
        assert record.performance_available, record.task   # the client's judge measures: so say its records
        if record.correct:   # timed on the client's judge: a paired speedup, the roofline
            assert record.timing is not None and record.speedup is not None and record.roofline is not None
            assert record.executor == "cpu" and "verdicts only" not in record.feedback
        else:
            assert record.timing is None
    # A candidate that fails never waits for a timed one: every other verdict came before the first correct one
    first_correct = min(done_order.index(i) for i, v in enumerate(EXPECTED) if v == "correct")
    assert all(done_order.index(i) < first_correct for i, v in enumerate(EXPECTED) if v != "correct"), done_order
    # each step recorded once, by the client's recorder (the lanes' verdicts and the timed steps alike)
    assert sorted(rows.rows) == sorted((t, v, c) for (t, c), v in zip(BATCH, EXPECTED)), rows.rows


def test_amap_awaits_the_same_batch(laned):
    client, _ = laned
    records = asyncio.run(client.amap(BATCH[:3]))
    assert [r.verdict.value for r in records] == EXPECTED[:3]


def test_evaluate_takes_its_samples_as_one_batch_on_the_lanes(laned):
    from pkb_env.evaluation import agent_from_spec, evaluate

    client, _ = laned
    report = evaluate(agent_from_spec("reference"), ["all_reduce", "broadcast"], samples=2, ks=(1, 2), client=client)
    assert [(r.task, r.verdict) for r in report.rows] == [("all_reduce", "correct")] * 2 + [("broadcast", "correct")] * 2
    assert all(r.speedup is not None for r in report.rows)


def test_bad_lane_counts_are_refused_with_the_fix():
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="verify_lanes must be an integer >= 0"):
            JudgeConfig(verify_lanes=bad)
