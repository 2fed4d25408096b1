"""Wrong candidates of the six kinds that slipped past the judge while the trials left a statement's corners
to chance (issue 42, item 2), each judged wrong in every step, with the trial that shows it named; the six
are in benchmarks/rule_candidates.py, which runs the 20-step check (docs/rule_coverage.md has its numbers).
The references and the correct alternatives of tests/test_task_candidates.py stay correct there."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from rule_candidates import CANDIDATES, judge_steps  # noqa: E402

STEPS = 2


@pytest.mark.parametrize("candidate", CANDIDATES, ids=[c.name.replace(" ", "-") for c in CANDIDATES])
def test_a_bug_in_a_stated_corner_is_wrong_in_every_step(env4, candidate):
    for info in judge_steps(env4, candidate.task, candidate.source, STEPS):
        assert info["verdict"] == "wrong", info["feedback"]
        assert "elements differ" in info["feedback"] or "shape" in info["feedback"], info["feedback"]
