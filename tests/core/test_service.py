"""The judge's front door (docs/architecture.md, "The service"): JudgeService and TaskSession as a caller sees
them, and the record's JSON round trip of every verdict. The config alone: test_config.py; the record made by
hand: test_record.py; the typed requests: tests/wire/test_requests.py; the verdict: tests/judge/test_verdict.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import FAST
from pkb_env import EvaluationRecord, JudgeService
from pkb_env.record import Flag, RankFailure, Stage, Verdict
from pkb_env.task import load_task

RING = open(os.path.join(os.path.dirname(__file__), "..", "..", "solutions", "examples", "all_reduce_ring.py")).read()
WRONG = "def solution(tensor):\n    return tensor.clone()\n"
RAISES = "def solution(tensor):\n    raise ValueError('no')\n"
PATCHES = "import time\ntime.perf_counter = lambda: 0.0\ndef solution(tensor):\n    return tensor.clone()\n"

API = textwrap.dedent("""
    import json, sys
    from pkb_env import EvaluationRecord, JudgeConfig, JudgeService
    from pkb_env.config import TimingProtocol
    config = JudgeConfig(executor="cpu", world_size=2, preset="tiny", trials=2,
                         protocol=TimingProtocol.quick("host"))
    with JudgeService(config) as judge:
        task = judge.open("all_reduce")
        assert task.prompt.startswith("# Task: ") and "## Hardware" in task.prompt, task.prompt[:200]
        assert task.reference == task.spec.reference_source and "def solution" in task.reference
        assert task.topology in task.prompt and task.spec.name == "all_reduce"
        record = task.judge(task.reference)
        assert record.correct, record.feedback
        other = judge.judge("all_gather", "def solution(x):\\n    return x.clone()\\n")
        assert other.task == "all_gather" and other.verdict.value == "wrong", other.feedback
        assert EvaluationRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
        pids = judge.process_ids()
    print(json.dumps({"pids": pids, "speedup": record.speedup}))
""")


def test_the_api_from_a_fresh_interpreter():
    """Every line of the front door's example, in a process that imported nothing else first."""
    done = subprocess.run([sys.executable, "-c", API], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["pids"] and out["speedup"] and out["speedup"] > 0
    import psutil

    assert not [p for p in out["pids"] if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def judge():
    with JudgeService(FAST.replace(executor="cpu", world_size=2)) as service:
        yield service


@pytest.mark.parametrize("code, verdict", [(RING, "correct"), (WRONG, "wrong"), (PATCHES, "flagged"),
                                           (RAISES, "runtime_error"), ("import nope_no_such_module\n"
                                                                       "def solution(tensor):\n    return tensor\n",
                                                                       "build_error"), ("((", "unparsable")])
def test_the_record_round_trips_through_json(judge, code, verdict):
    record = judge.open("all_reduce").judge(code)
    assert record.verdict.value == verdict, record.feedback
    text = json.dumps(record.to_dict())
    back = EvaluationRecord.from_dict(json.loads(text))
    assert back == record and back.to_dict() == record.to_dict()
    assert back.verdict is record.verdict and back.stage is record.stage  # enums, not strings
    assert type(back.flags) is list and all(isinstance(f, Flag) for f in back.flags)
    if record.timing is not None:
        assert back.timing.speedup == record.timing.speedup and back.speedup == record.speedup
    if record.failure is not None:
        assert isinstance(back.failure.failures[0], RankFailure) and back.failure.stage is record.failure.stage


def test_the_reference_is_billed_to_the_reference(judge):
    """The reference's trials and timing are the reference's part of a step, not the candidate's stages."""
    judge.forget_reference_timing("broadcast")
    record = judge.open("broadcast").judge("def solution(tensor, src):\n    return tensor.clone()\n")
    assert record.verdict is Verdict.WRONG and record.timing is None
    assert "time" not in record.stage_seconds and record.reference.timing_s > 0 and not record.reference.timing_cached
    assert record.wall_s >= sum(record.stage_seconds.values()) + record.reference.trials_s
    second = judge.open("broadcast").judge(load_task("broadcast").reference_source)
    assert second.correct and second.reference.timing_cached and second.reference.replay_s > 0


def test_the_hard_step_budget_ends_a_hang_before_its_trial_timeout():
    """A candidate that hangs in its trials is cut at the step's budget, not at the (longer) trial timeout."""
    config = FAST.replace(executor="cpu", world_size=2, trial_timeout_s=120.0, step_budget_s=8.0)
    with JudgeService(config) as service:
        record = service.open("all_reduce").judge("import time\ndef solution(tensor):\n    time.sleep(600)\n")
    assert record.verdict is Verdict.RUNTIME_ERROR and "within step_budget_s = 8 s" in record.error, record.error
    assert record.stage_seconds["run"] < 60  # the trial timeout (120 s) was never waited for


def test_calibration_happens_at_open_and_never_inside_a_step(tmp_path):
    config = FAST.replace(executor="cpu", world_size=2, cache_dir=str(tmp_path))
    with JudgeService(config.replace(calibration="cached")) as service:
        record = service.open("all_reduce").judge(RING)
        assert record.correct and service.calibration() is None and not (tmp_path / "calibration").exists()
    with JudgeService(config) as service:
        service.open("all_reduce", prestart=False)          # a prompt alone: nothing measured
        assert not (tmp_path / "calibration").exists()
        session = service.open("all_reduce")                # calibration="auto": measured here
        measured = list((tmp_path / "calibration").iterdir())
        assert len(measured) == 1 and service.calibration() is not None
        assert "Measured here" in session.prompt
        record = session.judge(RING)
        assert record.roofline.bound.source == "calibrated"
        assert list((tmp_path / "calibration").iterdir()) == measured


def test_open_refuses_what_cannot_be_judged_here(judge):
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        judge.open("nope")
    with pytest.raises(ValueError, match="no preset 'huge'"):
        judge.open("all_reduce", preset="huge")
    with pytest.raises(ValueError, match="does not take dtype 'int8'"):
        judge.open("all_reduce", dtype="int8")
    assert "all_reduce" in judge.tasks() and set(judge.tasks()) <= set(judge.tasks(preset="tiny"))


def test_code_the_screen_decides_is_refused_without_starting_anything():
    """Unparsable or flagged code needs no rank: `screen` decides it in this process (what `pkb-env eval`
    does first, so an empty file is refused at once); code that must run gets None."""
    with JudgeService(FAST.replace(executor="cpu", world_size=2)) as service:
        session = service.open("all_reduce", prestart=False)
        for code, verdict in (("", Verdict.UNPARSABLE), ("def solution(tensor:\n", Verdict.UNPARSABLE),
                              (PATCHES, Verdict.FLAGGED)):
            record = service.screen(session, code)
            assert record is not None and record.verdict is verdict and record.stage in (Stage.PARSE, Stage.SCREEN)
        assert service.screen(session, RING) is None
        assert service.process_ids() == []  # nothing was started
