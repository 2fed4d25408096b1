"""Rewards against hand-built EvaluationRecords: order, monotonicity, bounds, overrides, configs, credit."""
from __future__ import annotations

import math
from importlib import resources

import pytest
import yaml

from pkb_env.record import (Bound, CommTerm, EvaluationRecord, Flag, RooflineResult, Severity, TimingResult,
                            Verdict)
from pkb_env.rewards import (FastP, RewardResult, ShapedReward, TurnCredit, available_configs,
                             best_so_far, discounted_returns, improvement, load_reward, turn_credits)


def make_record(verdict: Verdict | None = Verdict.CORRECT, speedup: float | None = None,
                fraction: float | None = None, suspect: str | None = None, available: bool = True,
                flags: list[Flag] | None = None) -> EvaluationRecord:
    record = EvaluationRecord(task="all_reduce", world_size=4, preset="small", dtype="float32",
                              executor="cuda" if available else "cuda-emulated",
                              hardware="h200" if available else "cpu", verdict=verdict,
                              performance_available=available, flags=list(flags or []))
    if speedup is not None or suspect is not None:
        record.timing = TimingResult(time_s=1e-3, statistic="median", clock="events", median_s=1e-3, spread=0.05, min_s=9e-4,
                                     max_s=1.2e-3, calls=50, warmup_calls=5, reference_s=1e-3 * (speedup or 1.0),
                                     speedup=speedup, suspect=suspect)
    if fraction is not None:
        bound = Bound(source="datasheet", comm_s=1e-4, compute_s=0.0, memory_s=1e-5, bound_s=1e-4, serial_s=1.1e-4,
                      dominant="communication", bandwidth_gbps=400.0, alpha_s=1e-6, hbm_gbps=4800.0)
        record.roofline = RooflineResult(comm=[CommTerm("all_reduce", "world", 4, 1 << 20, 3 << 18, 1)], compute=[],
                                         hbm_bytes=2 << 20, bound=bound, fraction=fraction, algbw_gbps=1.0,
                                         busbw_gbps=1.5)
    return record


EXPLOIT = Flag(code="patch_reference", severity=Severity.EXPLOIT, message="monkeypatches the reference")
INFO = Flag(code="uses_threads", severity=Severity.INFO, message="starts threads")
FAILURES = [Verdict.FLAGGED, Verdict.UNPARSABLE, Verdict.BUILD_ERROR, Verdict.RUNTIME_ERROR, Verdict.WRONG]


@pytest.fixture(scope="module")
def shaped() -> ShapedReward:
    return load_reward("default")


# ---------------------------------------------------------------- ShapedReward: values and order

def test_failure_values_are_the_documented_constants(shaped):
    expected = {Verdict.FLAGGED: -1.0, Verdict.UNPARSABLE: -0.8, Verdict.BUILD_ERROR: -0.6,
                Verdict.RUNTIME_ERROR: -0.5, Verdict.WRONG: -0.2}
    for verdict, value in expected.items():
        result = shaped(make_record(verdict))
        assert isinstance(result, RewardResult)
        assert result.value == value
        assert result.terms["verdict"] == verdict.value
        assert result.terms["performance"] == "not_applicable"
        assert result.terms["base"] == value and result.terms["speedup_term"] == 0.0


def test_strict_order_failures_below_slowest_correct(shaped):
    values = [shaped(make_record(v, speedup=1.0, fraction=0.5)).value for v in FAILURES]
    assert values == sorted(values)
    assert values[-2] < values[-1]  # runtime_error < wrong, strictly
    slowest_correct = shaped(make_record(speedup=1e-6, fraction=0.0)).value
    assert slowest_correct == pytest.approx(0.3)
    assert values[-1] < slowest_correct
    unmeasured_correct = shaped(make_record(available=False)).value
    assert values[-1] < unmeasured_correct


def test_correct_value_formula(shaped):
    # speedup 2x: s = (log 2 - log 0.25) / (log 8 - log 0.25) = 3/5; fraction 0.5
    result = shaped(make_record(speedup=2.0, fraction=0.5))
    assert result.terms["speedup_score"] == pytest.approx(0.6)
    assert result.terms["speedup_term"] == pytest.approx(0.3)
    assert result.terms["roofline_term"] == pytest.approx(0.1)
    assert result.value == pytest.approx(0.3 + 0.3 + 0.1)
    assert result.terms["performance"] == "measured"
    assert result.terms["speedup"] == 2.0 and result.terms["roofline_fraction"] == 0.5
    # speedup 1x: s = 2/5
    assert shaped(make_record(speedup=1.0, fraction=0.0)).value == pytest.approx(0.3 + 0.5 * 0.4)


def test_value_is_sum_of_numeric_terms(shaped):
    for record in [make_record(speedup=3.3, fraction=0.7), make_record(Verdict.WRONG),
                   make_record(available=False), make_record(speedup=0.5)]:
        result = shaped(record)
        assert result.value == pytest.approx(result.terms["base"] + result.terms["speedup_term"]
                                             + result.terms["roofline_term"])


def test_strictly_increasing_in_speedup_within_clip(shaped):
    speedups = [0.26, 0.4, 0.9, 1.0, 1.1, 2.0, 4.0, 7.9]
    values = [shaped(make_record(speedup=s, fraction=0.3)).value for s in speedups]
    assert all(a < b for a, b in zip(values, values[1:])), values
    # clipped outside [0.25, 8]
    assert shaped(make_record(speedup=0.01, fraction=0.3)).value == pytest.approx(
        shaped(make_record(speedup=0.25, fraction=0.3)).value)
    assert shaped(make_record(speedup=100.0, fraction=0.3)).value == pytest.approx(
        shaped(make_record(speedup=8.0, fraction=0.3)).value)


def test_strictly_increasing_in_roofline_fraction(shaped):
    fractions = [0.0, 0.1, 0.25, 0.5, 0.75, 0.99, 1.0]
    values = [shaped(make_record(speedup=1.5, fraction=f)).value for f in fractions]
    assert all(a < b for a, b in zip(values, values[1:])), values
    assert values[-1] - values[0] == pytest.approx(0.2)
    # a fraction above 1 (bound underestimated) is clipped, and reported raw
    above = shaped(make_record(speedup=1.5, fraction=1.3))
    assert above.value == pytest.approx(values[-1])
    assert above.terms["roofline_fraction"] == 1.3 and above.terms["roofline_score"] == 1.0


def test_bounds_hold_over_a_grid(shaped):
    lo, hi = shaped.bounds
    assert (lo, hi) == (-1.0, pytest.approx(1.0))
    seen = []
    for verdict in [*FAILURES, Verdict.CORRECT]:
        for speedup in [None, 1e-9, 0.25, 1.0, 8.0, 1e9]:
            for fraction in [None, 0.0, 0.5, 1.0, 5.0]:
                for flags in [[], [INFO], [EXPLOIT]]:
                    value = shaped(make_record(verdict, speedup=speedup, fraction=fraction, flags=flags)).value
                    assert lo <= value <= hi
                    seen.append(value)
    assert min(seen) == -1.0
    assert max(seen) == pytest.approx(1.0)
    assert shaped(make_record(speedup=8.0, fraction=1.0)).value <= 1.0


def test_deterministic(shaped):
    record = make_record(speedup=2.7, fraction=0.4)
    assert shaped(record) == shaped(record)


# ---------------------------------------------------------------- ShapedReward: flags and performance

def test_exploit_flag_overrides_correct(shaped):
    result = shaped(make_record(speedup=8.0, fraction=1.0, flags=[EXPLOIT]))
    assert result.value == -1.0
    assert result.terms["verdict"] == "flagged"
    assert "patch_reference" in result.terms["reason"]
    assert shaped(make_record(Verdict.WRONG, flags=[EXPLOIT])).value == -1.0


def test_info_flags_are_not_penalised(shaped):
    assert shaped(make_record(speedup=2.0, fraction=0.5, flags=[INFO])).value == pytest.approx(0.7)


def test_unavailable_performance_gives_correct_base(shaped):
    # emulated ranks: even if a timing were present it must not be rewarded
    record = make_record(speedup=8.0, fraction=1.0, available=False)
    result = shaped(record)
    assert result.value == 0.3
    assert result.terms["performance"] == "unavailable"
    assert result.terms["speedup_term"] == 0.0 and result.terms["roofline_term"] == 0.0
    assert "cuda-emulated executor time-slices" in result.terms["reason"]
    assert "speedup" not in result.terms


def test_missing_timing_is_unavailable(shaped):
    result = shaped(make_record(speedup=None))
    assert result.value == 0.3 and result.terms["performance"] == "unavailable"


def test_suspect_timing_gives_correct_base(shaped):
    record = make_record(speedup=50.0, fraction=0.9, suspect="spread 3.2 over calls")
    assert record.speedup is None  # record.py hides suspect speedups
    result = shaped(record)
    assert result.value == 0.3
    assert result.terms["performance"] == "suspect"
    assert "spread 3.2" in result.terms["reason"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0])
def test_nonsense_speedup_is_suspect(shaped, bad):
    result = shaped(make_record(speedup=bad, fraction=0.5))
    assert result.value == 0.3 and result.terms["performance"] == "suspect"


def test_missing_roofline_earns_no_roofline_term(shaped):
    result = shaped(make_record(speedup=2.0, fraction=None))
    assert result.value == pytest.approx(0.6)
    assert result.terms["roofline"] == "unavailable" and result.terms["roofline_term"] == 0.0


def test_correct_without_performance_is_configurable():
    reward = load_reward("default", correct_without_performance=0.45)
    assert reward(make_record(available=False)).value == 0.45
    assert reward(make_record(speedup=2.0, suspect="clock jumped")).value == 0.45
    assert reward(make_record(speedup=2.0, fraction=0.5)).value == pytest.approx(0.7)


def test_record_without_verdict_is_an_error(shaped):
    with pytest.raises(ValueError, match="no verdict"):
        shaped(make_record(verdict=None))


# ---------------------------------------------------------------- fast_p

def test_fast_1_truth_table():
    fast = load_reward("fast_1")
    assert isinstance(fast, FastP) and fast.config["p"] == 1.0 and fast.bounds == (0.0, 1.0)
    cases = [
        (make_record(speedup=1.01), 1.0),
        (make_record(speedup=5.0, fraction=0.2), 1.0),
        (make_record(speedup=1.0), 0.0),          # strictly faster
        (make_record(speedup=0.7), 0.0),
        (make_record(Verdict.WRONG, speedup=3.0), 0.0),
        (make_record(Verdict.RUNTIME_ERROR), 0.0),
        (make_record(Verdict.UNPARSABLE), 0.0),
        (make_record(speedup=3.0, flags=[EXPLOIT]), 0.0),
        (make_record(speedup=3.0, available=False), 0.0),
        (make_record(speedup=3.0, suspect="outlier calls"), 0.0),
        (make_record(speedup=3.0, flags=[INFO]), 1.0),
    ]
    assert [fast(record).value for record, _ in cases] == [expected for _, expected in cases]


def test_fast_p_terms_say_why():
    fast = load_reward("fast_1")
    unavailable = fast(make_record(speedup=3.0, available=False)).terms
    assert unavailable["performance"] == "unavailable" and "time-slices ranks on one device" in unavailable["reason"]
    assert fast(make_record(speedup=3.0, suspect="outlier calls")).terms["performance"] == "suspect"
    slow = fast(make_record(speedup=0.9)).terms
    assert slow["speedup"] == 0.9 and "not above p=1" in slow["reason"]
    assert fast(make_record(speedup=3.0, flags=[EXPLOIT])).terms["verdict"] == "flagged"


def test_fast_p_threshold_override():
    fast_2 = load_reward("fast_1", p=2.0)
    assert fast_2(make_record(speedup=1.5)).value == 0.0
    assert fast_2(make_record(speedup=2.5)).value == 1.0


# ---------------------------------------------------------------- configs and validation

def test_default_yaml_matches_class_defaults():
    text = (resources.files("pkb_env.configs.rewards") / "default.yaml").read_text()
    config = yaml.safe_load(text)
    assert config.pop("kind") == "shaped"
    assert config == dict(ShapedReward.DEFAULTS)


def test_available_configs_and_load_by_name():
    assert {"default", "fast_1"} <= set(available_configs())
    default = load_reward()
    assert isinstance(default, ShapedReward) and default.name == "default"
    assert load_reward("fast_1").name == "fast_1"


def test_load_by_path(tmp_path):
    path = tmp_path / "steep.yaml"
    path.write_text("kind: shaped\nw_speedup: 0.6\nw_roofline: 0.1\n")
    reward = load_reward(str(path))
    assert isinstance(reward, ShapedReward) and reward.name == "steep"
    assert reward.config["w_speedup"] == 0.6 and reward.config["flagged"] == -1.0
    assert reward(make_record(speedup=8.0, fraction=1.0)).value == pytest.approx(1.0)
    fast = tmp_path / "fast_half.yml"
    fast.write_text("kind: fast_p\nname: fast_0.5\np: 0.5\n")
    loaded = load_reward(str(fast))
    assert isinstance(loaded, FastP) and loaded.name == "fast_0.5"
    assert loaded(make_record(speedup=0.6)).value == 1.0


def test_unknown_name_lists_available():
    with pytest.raises(ValueError, match=r"available: \[.*'default'.*'fast_1'"):
        load_reward("nope")


def test_missing_path_and_bad_kind(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_reward(str(tmp_path / "absent.yaml"))
    path = tmp_path / "bad.yaml"
    path.write_text("kind: sparse\n")
    with pytest.raises(ValueError, match="kind: 'sparse'"):
        load_reward(str(path))
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping"):
        load_reward(str(path))


@pytest.mark.parametrize("overrides, key", [
    ({"w_speeed": 0.5}, "w_speeed"),                                # unknown key
    ({"unparsable": -1.2}, "unparsable"),                           # below flagged
    ({"build_error": -0.9}, "build_error"),                         # below unparsable
    ({"runtime_error": -0.7}, "runtime_error"),                     # below build_error
    ({"wrong": -0.5}, "wrong"),                                     # not strictly above runtime_error
    ({"correct_base": -0.2}, "correct_base"),                       # correct could equal wrong
    ({"correct_base": -0.3}, "correct_base"),                       # correct below wrong
    ({"w_speedup": -0.1}, "w_speedup"),
    ({"w_roofline": 0.0}, "w_roofline"),                            # not strictly increasing
    ({"min_speedup": 8.0}, "max_speedup"),                          # min >= max
    ({"min_speedup": 0.0}, "min_speedup"),
    ({"max_speedup": "fast"}, "max_speedup"),
    ({"correct_without_performance": -0.2}, "correct_without_performance"),
    ({"correct_without_performance": 1.5}, "correct_without_performance"),
    ({"flagged": float("nan")}, "flagged"),
    ({"wrong": True}, "wrong"),
])
def test_shaped_config_validation_names_the_key(overrides, key):
    with pytest.raises(ValueError, match=rf"^{key}:"):
        load_reward("default", **overrides)


def test_fast_p_config_validation():
    with pytest.raises(ValueError, match=r"^p:"):
        load_reward("fast_1", p=-1.0)
    with pytest.raises(ValueError, match=r"^w_speedup:"):
        load_reward("fast_1", w_speedup=0.5)


def test_constructing_from_a_dict_directly():
    reward = ShapedReward({"wrong": -0.1, "correct_base": 0.2}, name="mine")
    assert reward.name == "mine" and reward(make_record(Verdict.WRONG)).value == -0.1
    assert reward.bounds == (-1.0, pytest.approx(0.9))
    with pytest.raises(ValueError, match="kind"):
        ShapedReward({"kind": "fast_p"})


# ---------------------------------------------------------------- multi-turn credit

def test_discounted_returns_numbers():
    assert discounted_returns([0.0, 0.0, 1.0], gamma=0.4) == pytest.approx([0.16, 0.4, 1.0])
    assert discounted_returns([-0.5, 0.3, 0.7]) == pytest.approx([-0.5 + 0.4 * 0.3 + 0.16 * 0.7,
                                                                  0.3 + 0.4 * 0.7, 0.7])
    assert discounted_returns([1.0, 2.0], gamma=0.0) == [1.0, 2.0]
    assert discounted_returns([1.0, 2.0, 3.0], gamma=1.0) == [6.0, 5.0, 3.0]
    assert discounted_returns([]) == []
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns([1.0], gamma=1.5)


def test_best_so_far():
    assert best_so_far([-0.5, 0.3, 0.1, 0.7, -1.0]) == [-0.5, 0.3, 0.3, 0.7, 0.7]
    assert best_so_far([]) == []


def test_turn_credit_modes():
    rewards = [-0.5, 0.3, 0.1, 0.7, -1.0]
    assert turn_credits(rewards, "turn") == rewards
    credits = turn_credits(rewards, TurnCredit.IMPROVEMENT)
    assert credits == pytest.approx([-0.5, 0.8, 0.0, 0.4, 0.0])
    assert math.isclose(sum(credits), max(rewards))  # credits telescope to the episode's best
    assert improvement(0.5, None) == 0.5 and improvement(0.5, 0.7) == 0.0
    assert improvement(0.9, 0.7) == pytest.approx(0.2)
    assert TurnCredit("improvement") is TurnCredit.IMPROVEMENT
    with pytest.raises(ValueError, match="mode"):
        turn_credits(rewards, "best")
