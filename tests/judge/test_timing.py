"""The timing protocol on CPU ranks (docs/timing.md): bursts released by the judge, every timed call checked,
claims held to the judge's clock. No wall-clock limit is asserted: only what holds on a loaded machine
(a host busy-wait is a lower bound on a call's time; a forged claim is far off the clock; counts are exact).

What the executor does around timed work (no rank starting beside a burst, the candidate stopped while the
reference replays, the warm-up's burst sizes, one core per rank) is tests/executors/test_timed_work.py's.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from adversarial.exploits import BY_NAME as EXPLOITS
from conftest import PRODUCTION, cpu_judge
from pkb_env.executors.interface import BurstRecord, RankBurst
from pkb_env.config import TimingProtocol
from pkb_env.judge.timing import BurstLog, check_claims, clock_allowance, suspect_reason
from pkb_env.task import load_task

REFERENCE = load_task("all_reduce").reference_source

# Right on the trials, then wrong in one call out of every 40: only half of the tensor is reduced.
# Wrong in one call of eight after the trials: checks of a few sampled calls a step (three, before issue 12) miss it
# in most steps; every timed call checked catches it in every step, however few calls a loaded machine's bursts
# hold (the quick protocol's three bursts of at least one call; a period of 40 went unseen in a step of 16 calls).
NOW_AND_THEN = """
import torch, torch.distributed as dist
_calls = [0]
def solution(tensor):
    _calls[0] += 1
    out = tensor.clone()
    if _calls[0] > 2 and _calls[0] % 8 == 0:
        half = out.view(-1)[: out.numel() // 2]
        dist.all_reduce(half)
        return out
    dist.all_reduce(out)
    return out
"""

# Caches its outputs by the address of its input (inputs are refreshed between bursts, addresses are not).
ADDRESS_CACHE = EXPLOITS["cache_data_ptr"].code

# Spends 200 us of host time per call on top of the work.
HOST_BOUND = """
import time, torch.distributed as dist
def solution(tensor):
    end = time.perf_counter() + 200e-6
    while time.perf_counter() < end:
        pass
    out = tensor.clone()
    dist.all_reduce(out)
    return out
"""


@pytest.fixture(scope="module")
def production2():
    with cpu_judge(2, PRODUCTION) as judge:
        judge.open("all_reduce")
        yield judge


def test_every_timed_call_is_checked_and_the_counts_add_up(production2):
    record = production2.judge("all_reduce", REFERENCE)
    assert record.correct, record.feedback
    t = record.timing
    assert t.bursts >= PRODUCTION.protocol.min_bursts and t.calls >= 8 * t.bursts and t.input_sets == t.calls
    assert record.verify.checked == 2 * 2 and record.timed_check.checked == t.calls * 2  # trials, every timed call
    assert record.speedup == pytest.approx(t.reference_s / t.time_s)
    assert t.min_s <= t.time_s <= t.max_s and 0 < t.claim_ratio <= 1.0 and t.clock_margin_s > 0
    assert t.statistic == "interval-min" and t.clock == "host" and t.launch_s > 0
    assert 0.25 <= record.speedup <= 4.0, record.feedback  # a gross error (the old 4-8x) cannot hide in this


def test_wrong_in_one_call_of_eight_is_wrong_every_time(production2):
    """Issue 12's must-show: judged wrong in 20 steps out of 20 (one call in forty passed 7 of 8 with sampled checks;
    one in eight: 1 - (7/8)^3 = 33% caught a step by three sampled calls)."""
    verdicts = []
    for _ in range(20):
        record = production2.judge("all_reduce", NOW_AND_THEN)
        verdicts.append((record.verdict.value, record.stage.value))
        assert "timed call" in record.feedback, record.feedback
        # the series stops at the first burst holding a wrong call and a passing one (BurstSeries._known_wrong):
        # eight calls, one wrong, come in at most four bursts
        assert record.timing.bursts < PRODUCTION.protocol.min_bursts, record.timing.bursts
    assert verdicts == [("wrong", "time")] * 20


def test_a_cache_keyed_on_input_addresses_is_wrong(production2):
    record = production2.judge("all_reduce", ADDRESS_CACHE)
    assert record.verdict.value == "wrong" and record.stage.value == "time", record.feedback


@pytest.mark.parametrize("target, pairs", [(10.0, 5), (0.0, 9)])
def test_pairs_are_added_until_the_interval_is_narrow_or_its_budget_ends(target, pairs):
    """Issue 46: a candidate's bursts stop on the speedup's interval, not on the budget alone. With any interval
    narrow enough, the step stops at min_bursts (5) pairs though its budgets allow seconds; with none narrow
    enough (a zero width), it goes on past `budget_s` (10 ms) to the cap, here max_bursts (9)."""
    protocol = replace(PRODUCTION.protocol, budget_s=0.01, interval_budget_s=5.0, replay_budget_s=30.0,
                       interval_target=target, min_bursts=5, max_bursts=9)
    with cpu_judge(2, PRODUCTION.replace(protocol=protocol)) as judge:
        record = judge.judge("all_reduce", REFERENCE)
    assert record.correct, record.feedback
    assert record.timing.pairs == record.timing.bursts == pairs


def test_a_host_bound_candidate_is_charged_its_host_time(production2):
    record = production2.judge("all_reduce", HOST_BOUND)
    assert record.correct, record.feedback
    t = record.timing
    assert t.time_s >= 200e-6 and t.launch_s >= 200e-6, record.feedback


# -- the clock check, on logs made by hand -----------------------------------------------------------------

def _log(busy: float, overhead: float, bursts: int = 6, ranks: int = 2, calls: int = 64, marks_every: int = 4,
         **changes) -> BurstLog:
    log = BurstLog()
    for b in range(bursts):
        released = 100.0 + b
        reports = []
        for _ in range(ranks):
            report = RankBurst(seen_at=released + 1e-5, ended_at=released + busy, busy_s=busy, host_s=busy,
                               idle_s=None, marks=[busy * (i + 1) / 16 for i in range(calls // marks_every)],
                               received=released + busy + overhead)
            reports.append(replace(report, **changes))
        log.bursts.append(BurstRecord(calls, marks_every, released, reports))
    return log


def test_honest_reports_pass_with_their_margin():
    check = check_claims(_log(0.04, 0.001), allowance_s=0.004)
    assert check.problem is None and check.margin_s == pytest.approx(0.003) and check.claim_ratio < 1


@pytest.mark.parametrize("changes, words", [
    ({"busy_s": 0.01}, "less per burst"),                     # a quarter of the real time: far off the clock
    ({"busy_s": 0.05}, "rules out"),                           # longer than the judge's own window
    ({"seen_at": 99.0}, "rules out"),                          # saw the release before the judge made it
    ({"marks": [0.001]}, "marks"),                             # not the count the judge asked for
])
def test_reports_the_clock_rules_out_are_flagged(changes, words):
    check = check_claims(_log(0.04, 0.001, **changes), allowance_s=0.004)
    assert check.problem and words in check.problem


def test_a_load_that_delays_the_reference_next_to_each_burst_is_allowed_but_a_forgery_is_not():
    """A host busy for the whole step delays every report; the reference's own half of each pair shows it, so an
    honest candidate late by 50 ms in every burst passes where the reference was as late beside it, and a rank
    that claims less than it took is still caught where the reference beside it was prompt."""
    from pkb_env.judge.timing import paired_allowance

    protocol = TimingProtocol.for_clock("host")
    loaded = _log(0.04, 0.05)                        # 50 ms between every burst's end and its report
    assert check_claims(loaded, allowance_s=0.004).problem        # against the open's allowance alone: flagged
    beside = paired_allowance(protocol, _log(0.04, 0.05))         # the reference as late next to each burst
    assert check_claims(loaded, allowance_s=0.004, paired=beside).problem is None
    prompt = paired_allowance(protocol, _log(0.04, 0.001))        # the reference prompt: 4 ms allowed
    forged = _log(0.04, 0.001, busy_s=0.01)                       # claims a quarter of the time it took
    assert "less per burst" in check_claims(forged, allowance_s=0.004, paired=prompt).problem


def test_the_allowance_comes_from_the_reference_and_has_a_floor():
    protocol = TimingProtocol.for_clock("host")
    assert clock_allowance(protocol, np.zeros((6, 2))) == protocol.clock_floor_s
    assert clock_allowance(protocol, np.full((6, 2), 0.01)) == pytest.approx(0.04)


def test_suspect_only_below_the_physical_floor():
    assert suspect_reason(10e-6, None) is None
    assert suspect_reason(10e-6, 5e-6) is None
    assert "below the physical floor" in suspect_reason(4e-6, 5e-6)


@pytest.mark.parametrize("n, critical", [(4, None), (5, 0), (8, 5), (10, 10), (20, 60)])
def test_the_speedup_interval_is_wilcoxons(n, critical):
    """The interval's ends are Walsh averages k in from either end, k - 1 the published critical value of the
    signed-rank statistic at 5% one-sided (Wilcoxon's table; none for n = 4)."""
    from pkb_env.judge.pair_stats import signed_rank_interval

    values = np.arange(n, dtype=float)[::-1].copy()   # unsorted on purpose
    low, high = signed_rank_interval(values)
    if critical is None:
        assert (low, high) == (None, None)
        return
    walsh = sorted((values[i] + values[j]) / 2 for i in range(n) for j in range(i, n))
    assert (low, high) == (walsh[critical], walsh[len(walsh) - 1 - critical])


def test_the_speedup_interval_covers_the_centre_about_nine_times_in_ten():
    """2000 steps of 10 pairs, log-ratios symmetric about 0 (normal and heavy-tailed): the interval holds 0 in
    about 91.6% of them (the exact level for n = 10), and the estimate spreads less than the plain median."""
    from pkb_env.judge.pair_stats import pseudo_median, signed_rank_interval

    rng = np.random.default_rng(7)
    for noise in (lambda: rng.standard_normal(10) * 0.12, lambda: rng.standard_t(3, 10) * 0.09):
        covered, estimates, medians = 0, [], []
        for _ in range(2000):
            logs = noise()
            low, high = signed_rank_interval(logs)
            covered += low <= 0 <= high
            estimates.append(pseudo_median(logs))
            medians.append(np.median(logs))
        assert 0.89 <= covered / 2000 <= 0.94
        assert np.std(estimates) < np.std(medians)


def test_an_interval_is_settled_when_both_ends_lie_within_the_target():
    from pkb_env.judge.pair_stats import settled

    assert not settled(np.ones(4), 0.5)                  # 4 pairs: no interval exists
    assert settled(np.ones(5), 0.0)
    spread = np.array([0.9, 0.95, 1.0, 1.05, 1.1, 0.97, 1.03])
    assert settled(spread, 0.12) and not settled(spread, 0.03)
    assert not settled(np.array([1.0, 1.0, 1.0, 1.0, np.inf, 0.0]), 0.5)   # the unreadable ratios left out: 4


def test_the_speedup_is_the_pseudo_median_of_the_log_ratios():
    """The Hodges-Lehmann estimate (the median of the Walsh averages), taken in logs: a candidate against the
    reference reads the reciprocal of the reference against it, and one wild pair of ten moves it little."""
    from pkb_env.judge.pair_stats import pseudo_median

    assert pseudo_median(np.array([0.0, 1.0, 2.0, 10.0])) == pytest.approx(1.75)
    logs = np.log(np.array([1.02, 0.97, 1.05, 0.99, 1.01, 1.03, 0.98, 1.00, 1.04, 0.96]))
    assert math.exp(pseudo_median(-logs)) == pytest.approx(1 / math.exp(pseudo_median(logs)))
    wild = logs.copy()
    wild[0] = math.log(5.0)
    assert abs(math.exp(pseudo_median(wild)) - math.exp(pseudo_median(logs))) < 0.02
