"""Wrong candidates of the six kinds that slipped past the judge while the trials left a statement's corners
to chance (issue 42, item 2), each judged wrong in every step, with the trial that shows it named; the six
are in benchmarks/rule_candidates.py, which runs the 20-step check (docs/rule_coverage.md has its numbers).
The references and the correct alternatives of tests/tasks/test_candidates.py stay correct there."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from rule_candidates import CANDIDATES  # noqa: E402

STEPS = 2


@pytest.mark.parametrize("candidate", CANDIDATES, ids=[c.name.replace(" ", "-") for c in CANDIDATES])
def test_a_bug_in_a_stated_corner_is_wrong_in_every_step(verdicts4, candidate):
    for _ in range(STEPS):
        record = verdicts4.judge(candidate.task, candidate.source)
        assert record.verdict.value == "wrong", record.feedback
        assert "elements differ" in record.feedback or "shape" in record.feedback, record.feedback
