"""Every primitive at world size 4: the reference is judged correct at ~1x with a roofline fraction."""
import pytest

from pkb_env.task import task_names


@pytest.mark.parametrize("task", task_names())
def test_reference_is_correct_and_about_1x(env4, task):
    obs, _ = env4.reset(options={"task": task})
    assert obs["task_id"] == task
    obs, reward, terminated, truncated, info = env4.step(obs["reference"])
    assert info["correct"], info["feedback"]
    assert info["verdict"] == "correct" and info["stage"] == "done" and info["error"] is None
    assert 0.5 <= info["speedup"] <= 2.0, info["feedback"]
    assert 0.0 < info["roofline_fraction"] <= 1.0
    assert reward > 0.0 and info["reward_terms"]["performance"] == "measured"
    record = info["record"]
    assert record.verify.checked == 2 * 4 + 3 * 4  # 2 trials + 3 sampled timed calls, on 4 ranks
    assert record.timing.calls >= 10 and record.timing.reference_s > 0 and record.timing.statistic == "min"
