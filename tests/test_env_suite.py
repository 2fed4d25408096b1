"""Every task of the suite at world size 4 on CPU ranks: the reference is judged correct at about 1x, and its
roofline fraction, never clipped, lies in (0, 1]: above 1 the cost model or the calibration is wrong."""
import pytest

from pkb_env.task import runnable_tasks


@pytest.mark.parametrize("task", runnable_tasks(4, "tiny"))
def test_reference_is_correct_about_1x_and_within_its_roofline(env4, task):
    obs, _ = env4.reset(options={"task": task})
    assert obs["task_id"] == task
    obs, reward, terminated, truncated, info = env4.step(obs["reference"])
    assert info["correct"], info["feedback"]
    assert info["verdict"] == "correct" and info["stage"] == "done" and info["error"] is None
    assert 0.25 <= info["speedup"] <= 4.0, info["feedback"]  # the same code twice; wide: a shared, loaded CPU
    record = info["record"]
    assert record.timing.suspect is None, info["feedback"]
    assert record.roofline.bound.source == "calibrated" and not record.roofline.bound.missing
    assert 0.0 < info["roofline_fraction"] <= 1.0, info["feedback"]
    assert reward > 0.0 and info["reward_terms"]["performance"] == "measured"
    assert record.verify.checked == 2 * 4 + 3 * 4  # 2 trials + 3 sampled timed calls, on 4 ranks
    assert record.timing.calls >= 10 and record.timing.reference_s > 0 and record.timing.statistic == "min"
