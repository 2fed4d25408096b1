"""The verdict (pkb_env/judge/verdict.py): it follows from a record's results alone, without side effects."""
from __future__ import annotations

import pytest

from pkb_env.judge.verdict import decide
from pkb_env.record import (EvaluationRecord, Flag, ParseResult, RankFailure, ScreenResult, Severity, Stage,
                            StageFailure, Verdict, VerifyResult)


def _record(**parts) -> EvaluationRecord:
    record = EvaluationRecord(task="t", world_size=2, preset="tiny", dtype="float32", executor="cpu", hardware="x")
    record.parse, record.screen = ParseResult("code", 4, False), ScreenResult()
    for key, value in parts.items():
        setattr(record, key, value)
    return record


@pytest.mark.parametrize("parts, stage, verdict, flag", [
    ({"parse": ParseResult(None, 0, False, error="empty")}, Stage.PARSE, Verdict.UNPARSABLE, None),
    ({"screen": ScreenResult([Flag("monkeypatch", Severity.EXPLOIT, "patches")], error="bad signature")},
     Stage.SCREEN, Verdict.FLAGGED, "monkeypatch"),
    ({"failure": StageFailure(Stage.BUILD, "boom", [RankFailure(0, "exception", "boom", "build")])},
     Stage.BUILD, Verdict.BUILD_ERROR, None),
    ({"failure": StageFailure(Stage.RUN, "late", [RankFailure(1, "timeout", "late", "trials")])},
     Stage.RUN, Verdict.RUNTIME_ERROR, None),
    ({"failure": StageFailure(Stage.RUN, "no build", [   # a kernel built inside the first call, refused
        RankFailure(0, "exception", "line 9, in solution: ext = build()\nCompileError: building extension 'e' "
                                    "failed:\ncuda.cu(3): error: expected a ';'", "trials"),
        RankFailure(1, "timeout", "waited for rank 0", "trials")])},
     Stage.RUN, Verdict.BUILD_ERROR, None),
    ({"failure": StageFailure(Stage.RUN, "raised", [
        RankFailure(0, "exception", "line 9, in solution: raise ValueError('no CompileError: here')", "trials")])},
     Stage.RUN, Verdict.RUNTIME_ERROR, None),
    ({"failure": StageFailure(Stage.BUILD, "x", [RankFailure(0, "exception", "x", "build"),
                                                  RankFailure(1, "tampered", "patched", "build")])},
     Stage.BUILD, Verdict.FLAGGED, "runtime_tampering"),
    ({"failure": StageFailure(Stage.TIME, "claims", [RankFailure(0, "forged_timing", "claims", "timing")])},
     Stage.TIME, Verdict.FLAGGED, "forged_timing"),
    ({"verify": VerifyResult(False, 2)}, Stage.VERIFY, Verdict.WRONG, None),
    ({"verify": VerifyResult(True, 2), "timed_check": VerifyResult(False, 80)}, Stage.TIME, Verdict.WRONG, None),
    ({"verify": VerifyResult(True, 2), "timed_check": VerifyResult(True, 80)}, Stage.DONE, Verdict.CORRECT, None),
])
def test_the_verdict_follows_from_the_results_alone(parts, stage, verdict, flag):
    record = _record(**parts)
    before = record.to_dict()
    decision = decide(record)
    assert (decision.stage, decision.verdict) == (stage, verdict)
    assert [f.code for f in decision.flags if f.severity is Severity.EXPLOIT] == ([flag] if flag else [])
    assert record.to_dict() == before  # no side effects
