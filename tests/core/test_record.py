"""The record made by hand (pkb_env/record.py): its JSON round trip keeps non-finite numbers and refuses
unknown fields. Records the judge makes, of every verdict: test_service.py."""
from __future__ import annotations

import json

import pytest

from pkb_env import EvaluationRecord
from pkb_env.record import Stage, Verdict, VerifyResult


def test_a_record_with_non_finite_numbers_round_trips():
    record = EvaluationRecord(task="all_reduce", world_size=2, preset="tiny", dtype="float32", executor="cpu",
                              hardware="x", verdict=Verdict.WRONG, stage=Stage.VERIFY)
    record.verify = VerifyResult(False, 4, [])
    from pkb_env.record import Mismatch

    record.verify.mismatches.append(Mismatch("trial 0", 1, "output", "NaN", max_abs_err=float("nan"),
                                             max_rel_err=float("inf")))
    back = EvaluationRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert back == record and str(back.verify.mismatches[0].max_rel_err) == "inf"
    with pytest.raises(ValueError, match="no field"):
        EvaluationRecord.from_dict({**record.to_dict(), "extra": 1})
