"""The speed term knows its uncertainty (rewards/base.py, credited_speedup): the step's 90% interval from its paired
bursts decides what speedup is credited, so identical code earns the same reward every step."""
import dataclasses

import pytest

from pkb_env.rewards import load_reward
from rewards.test_rewards import make_record


def with_interval(speedup: float, low: float | None, high: float | None, fraction: float = 0.5):
    record = make_record(speedup=speedup, fraction=fraction)
    record.timing = dataclasses.replace(record.timing, speedup_low=low, speedup_high=high)
    return record


@pytest.mark.parametrize("speedup, low, high", [(1.08, 0.93, 1.21), (0.91, 0.85, 1.02), (1.0, 0.99, 1.01),
                                                (1.6, 0.7, 2.3)])
def test_no_speed_credit_while_the_interval_straddles_one(speedup, low, high):
    shaped = load_reward("default")
    straddling = shaped(with_interval(speedup, low, high))
    exactly_one = shaped(with_interval(1.0, None, None))
    assert straddling.value == pytest.approx(exactly_one.value)
    assert straddling.terms["credited_speedup"] == 1.0 and "straddles" in straddling.terms["speedup_credit"]
    assert straddling.terms["speedup"] == speedup   # the point estimate is still reported


def test_the_lower_end_counts_above_one_and_the_upper_end_below():
    shaped = load_reward("default")
    faster = shaped(with_interval(2.0, 1.5, 2.6))
    slower = shaped(with_interval(0.5, 0.4, 0.7))
    assert faster.terms["credited_speedup"] == 1.5 and slower.terms["credited_speedup"] == 0.7
    assert faster.value == pytest.approx(shaped(with_interval(1.5, None, None)).value)
    assert slower.value == pytest.approx(shaped(with_interval(0.7, None, None)).value)
    assert shaped(with_interval(1.0, 0.95, 1.05)).value > slower.value   # still monotone in what is shown


def test_point_credit_and_records_without_an_interval_use_the_estimate():
    point = load_reward("default").__class__({"speedup_credit": "point"})
    assert point(with_interval(1.08, 0.93, 1.21)).terms["credited_speedup"] == 1.08
    assert load_reward("default")(with_interval(1.3, None, None)).terms["credited_speedup"] == 1.3
    with pytest.raises(ValueError, match="speedup_credit: 'median' is not 'interval'"):
        load_reward("default").__class__({"speedup_credit": "median"})


def test_fast_p_counts_the_interval_lower_end_as_the_metric_does():
    fast = load_reward("fast_1")
    assert fast(with_interval(1.3, 1.1, 1.5)).value == 1.0
    straddles = fast(with_interval(1.3, 0.9, 1.7))
    assert straddles.value == 0.0 and "lower end 0.9" in straddles.terms["reason"]
    assert fast.__class__({"speedup_credit": "point"})(with_interval(1.3, 0.9, 1.7)).value == 1.0
