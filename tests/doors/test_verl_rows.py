"""verl's reward takes a row whose reward_model.ground_truth is None when extra_info names the task (issue 47, row
11): extra_info comes first, as the adapter's docstring says; the row was refused."""
import asyncio

import pytest

from pkb_env.entrypoints.verl import compute_score, row_target


def test_a_row_without_ground_truth_takes_its_task_from_extra_info():
    assert row_target(None, {"task": "all_reduce", "world_size": 2, "index": 7}) == ("all_reduce", {"world_size": 2})
    with pytest.raises(ValueError, match="no task for this row: set extra_info.task"):
        row_target(None, {"index": 7})


def test_compute_score_judges_such_a_row():
    # an answer the parser refuses: judged without starting a rank
    result = asyncio.run(compute_score("pkb_env", "no code here (", None, {"task": "all_reduce", "index": 0},
                                       executor="cpu", world_size=2))
    assert result["task"] == "all_reduce" and result["verdict"] == "unparsable" and result["judged"] == 1.0
