"""The timing protocol on CPU ranks (docs/timing.md): bursts released by the judge, every timed call checked,
claims held to the judge's clock. No wall-clock limit is asserted: only what holds on a loaded machine
(a host busy-wait is a lower bound on a call's time; a forged claim is far off the clock; counts are exact).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import replace

import numpy as np
import pytest

from adversarial.exploits import BY_NAME as EXPLOITS
from conftest import make_env, judge_of
from pkb_env.config import JudgeConfig
from pkb_env.executors.interface import BurstRecord, RankBurst
from pkb_env.executors.rank_set import RankSet
from pkb_env.executors.sessions import ReferenceRanks, Session
from pkb_env.config import TimingProtocol
from pkb_env.judge.timing import BurstLog, check_claims, clock_allowance, suspect_reason
from pkb_env.wire.gate import PageView, ReleasePage
from pkb_env.wire.messages import START_PHASES
from pkb_env.wire.requests import TaskWorkload

PRODUCTION = JudgeConfig(trials=2, trial_timeout_s=10.0, timing_timeout_s=30.0,
                         protocol=TimingProtocol.for_clock("host"))

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
def env2():
    env = make_env(world_size=2, config=PRODUCTION)
    env.reset(seed=0)
    yield env
    env.close()


def test_every_timed_call_is_checked_and_the_counts_add_up(env2):
    obs, _ = env2.reset(options={"task": "all_reduce"})
    _, _, _, _, info = env2.step(obs["reference"])
    assert info["correct"], info["feedback"]
    t, record = info["record"].timing, info["record"]
    assert t.bursts >= PRODUCTION.protocol.min_bursts and t.calls >= 8 * t.bursts and t.input_sets == t.calls
    assert record.verify.checked == 2 * 2 and record.timed_check.checked == t.calls * 2  # trials, every timed call
    assert info["speedup"] == pytest.approx(t.reference_s / t.time_s)
    assert t.min_s <= t.time_s <= t.max_s and 0 < t.claim_ratio <= 1.0 and t.clock_margin_s > 0
    assert t.statistic == "interval-min" and t.clock == "host" and t.launch_s > 0
    assert 0.25 <= info["speedup"] <= 4.0, info["feedback"]  # a gross error (the old 4-8x) cannot hide in this


def _stopped(ranks: RankSet) -> bool:
    """Every thread of every process under the rank set's cell stopped (/proc's state letter)."""
    def threads(pid: int) -> list[str]:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return []
        states = []
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass
        return states

    import psutil

    processes = psutil.Process(ranks.cell.pid).children(recursive=True)
    return bool(processes) and all(state in "tTZX" for p in processes for state in threads(p.pid))


def _spy_releases(monkeypatch, executor, seen: list) -> None:
    """Record, at the release of every burst, its role and whether every spare in a phase of its start was
    stopped (`starting` and `_stopped`) and no ended candidate rank set was still coming down."""
    real = RankSet.release

    def release(ranks, epoch):
        quiet = all(_stopped(spare) for spare in executor.spares if spare.starting) and not executor._ending
        seen.append((ranks.role, quiet))
        return real(ranks, epoch)

    monkeypatch.setattr(RankSet, "release", release)


def test_the_reference_is_timed_while_no_rank_is_starting(monkeypatch):
    """The first step times the reference (and the cache keeps that time for every later step): the next
    candidate rank set, pre-started at reset, must have finished starting by then, so the judge's own
    start-up work does not run beside the reference's bursts."""
    env = make_env(world_size=2, config=PRODUCTION)
    seen: list = []
    _spy_releases(monkeypatch, judge_of(env).executor, seen)
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        _, _, _, _, info = env.step(obs["reference"])
        assert info["correct"], info["feedback"]
        reference = [quiet for role, quiet in seen if role == "reference"]
        assert reference and all(reference), seen
    finally:
        env.close()


@pytest.mark.parametrize("depth", [1, 4])
def test_no_rank_set_starts_while_a_candidate_is_timed(monkeypatch, depth):
    """Spares start, and move from one phase of their start to the next, only at untimed work, and every
    spare still in a phase is stopped when a burst is released: no rank makes its context or communicators
    beside a candidate's bursts, and no step waits for a phase to end. Spares wait beside a running candidate
    only where cells have their own namespaces (the candidate cannot reach them); elsewhere none exists until
    the candidate is gone. There, too, a step does not wait for its candidate's ranks to come down: they are
    killed with their namespace, and confirmed gone before the next burst."""
    import pkb_env.judge.candidate as candidate

    env = make_env(world_size=2, config=PRODUCTION.replace(spares=depth), target_speedup=float("inf"))
    executor = judge_of(env).executor
    if depth > 1 and executor.namespaces_missing:
        env.close()
        pytest.skip(f"spares wait beside a candidate only in cells with namespaces ({executor.namespaces_missing})")
    waiting, released = [], []
    real = candidate.run_bursts

    def spy(session, *args, **kwargs):
        waiting.append((len(executor.spares), all(s.cell.contained for s in executor.spares)))
        return real(session, *args, **kwargs)

    monkeypatch.setattr(candidate, "run_bursts", spy)
    _spy_releases(monkeypatch, executor, released)
    ended = []
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        last = len(START_PHASES) - 1
        for step in range(4):
            _, _, _, _, info = env.step(obs["reference"])
            assert info["correct"], info["feedback"]
            if executor.namespaces_missing is None:   # told to end, not waited for; the step before's confirmed
                assert len(executor._ending) == 1 and not executor._ending[0].closed
                assert all(r.closed for r in ended)
                ended.append(executor._ending[0])
            assert len(executor.spares) == executor.spares.depth == depth  # started for the next steps
            assert all(not s.closed for s in executor.spares)
            asked = [s.asked for s in executor.spares]   # oldest first, none behind a younger one; a lone one whole
            assert asked == sorted(asked, reverse=True) and (depth > 1 or asked == [last]), asked
        assert waiting == [(depth - 1, True)] * 4, waiting
        candidate_bursts = [quiet for role, quiet in released if role == "candidate"]
        assert len(candidate_bursts) >= 4 * PRODUCTION.protocol.min_bursts and all(candidate_bursts), released
    finally:
        env.close()


WARMS_UP_SLOWLY = """
import time, torch.distributed as dist
_calls = [0]

def solution(tensor):
    _calls[0] += 1
    if _calls[0] <= 40:   # its first calls are slow (a cold cache, a pool that grows)
        time.sleep(0.002)
    out = tensor.clone()
    dist.all_reduce(out)
    return out
"""


# The reference all-reduce with helpers that would run beside the reference's replay if they could: a thread
# and a child process of its own session, both waking every millisecond.
WITH_HELPERS = """
import subprocess, sys, threading, time, torch.distributed as dist
def _tick():
    while True:
        time.sleep(0.001)
threading.Thread(target=_tick, daemon=True).start()
_child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.001)"],
                          start_new_session=True)
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
"""


def test_every_process_of_the_candidate_is_stopped_while_the_reference_replays_its_bursts(monkeypatch):
    """The reference's replay of each scored burst is the timed half of its pair, right after the burst, so
    nothing of the candidate may run beside it: every thread of every process under its cell (ranks, a
    helper thread, a child in a session of its own) is stopped, and all run again for the next burst. The
    reference fingerprints its half while the candidate fingerprints its own where the candidate is contained
    (it cannot reach the reference's processes), else inside the freeze."""
    import psutil

    from pkb_env.sandbox import freezer

    env = make_env(world_size=2, config=PRODUCTION, target_speedup=float("inf"))
    executor = judge_of(env).executor
    taken, at_replay, between, at_fingerprints = [], [], [], []
    take, replay, burst = executor._candidate_ranks, ReferenceRanks.replay, Session.burst
    ask = ReferenceRanks.ask_fingerprints

    def spy_take():
        taken.append(take())
        return taken[-1]

    def stopped(ranks: RankSet) -> dict[int, bool]:
        """Per live process under the candidate's cell: every thread of it stopped."""
        found = {}
        for pid in freezer.descendants([ranks.cell.pid]):
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    found[pid] = freezer._all_threads_stopped(pid)
            except psutil.NoSuchProcess:
                pass
        return found

    def spy_replay(session, *args, **kwargs):
        at_replay.append(stopped(taken[-1]))
        return replay(session, *args, **kwargs)

    def spy_burst(session, *args, **kwargs):
        if taken and session.ranks is taken[-1] and at_replay:   # a burst after a pair: resumed (SIGCONT lands
            for _ in range(100):                                 # within microseconds; allow a loaded machine)
                now = stopped(taken[-1])
                if not any(now.values()):
                    break
                time.sleep(0.01)
            between.append(now)
        return burst(session, *args, **kwargs)

    def spy_ask(session, *args, **kwargs):
        at_fingerprints.append(any(stopped(taken[-1]).values()))
        return ask(session, *args, **kwargs)

    monkeypatch.setattr(executor, "_candidate_ranks", spy_take)
    monkeypatch.setattr(ReferenceRanks, "replay", spy_replay)
    monkeypatch.setattr(ReferenceRanks, "ask_fingerprints", spy_ask)
    monkeypatch.setattr(Session, "burst", spy_burst)
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        _, _, _, _, info = env.step(WITH_HELPERS)
        assert info["correct"], info["feedback"]
        assert at_replay and all(stopped and all(stopped.values()) for stopped in at_replay), at_replay
        # the ranks, each rank's child, and the namespace's PID 1 where there is one
        assert all(len(stopped) >= 2 * 2 for stopped in at_replay), at_replay
        assert between and not any(any(now.values()) for now in between), between   # resumed
        assert len(at_fingerprints) == len(at_replay)
        assert not any(at_fingerprints) if taken[-1].cell.contained else all(at_fingerprints), at_fingerprints
        record = info["record"]
        assert record.timing.pairs == len(at_replay) == len(record.timing.pair_ratios) >= 3
        assert record.timing.speedup_spread is not None
        assert min(record.timing.pair_ratios) <= record.speedup <= max(record.timing.pair_ratios)
        assert record.timing.cached_reference_s > 0 and record.speedup == record.timing.speedup
        assert record.reference.replay_s > 0 and record.timed_check.checked == record.timing.calls * 2
        if record.timing.pairs >= 5:   # the signed-rank interval exists, holds the speedup, and the feedback says it
            low, high = record.speedup_interval
            assert low <= record.speedup <= high and f"over {record.timing.pairs} paired bursts" in info["feedback"]
    finally:
        env.close()


def test_no_scored_burst_is_longer_than_the_warm_up_bursts(monkeypatch):
    """The warm-up grows the bursts to the plan's upper size, so a scored burst never holds more outputs
    than the ranks held before (a fresh process's memory pool must not grow inside a timed burst)."""
    import pkb_env.judge.candidate as candidate
    import pkb_env.judge.reference as reference

    sessions, sizes = [], []   # per timing session of a task: (burst sizes in order, scored bursts, warm-up calls)
    real_burst = Session.burst

    def spying(module):
        real_run = module.run_bursts

        def run(session, work, *args, **kwargs):
            sizes.clear()
            log = real_run(session, work, *args, **kwargs)
            if isinstance(work.workload, TaskWorkload):  # a task's session, not the calibration's probes
                sessions.append((list(sizes), len(log.bursts), log.warmup_calls))
            return log
        monkeypatch.setattr(module, "run_bursts", run)

    def burst(session, workload, seeds, calls, *args, **kwargs):
        sizes.append(calls)
        return real_burst(session, workload, seeds, calls, *args, **kwargs)

    spying(candidate)
    spying(reference)
    monkeypatch.setattr(Session, "burst", burst)
    env = make_env(world_size=2, config=PRODUCTION)
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        _, _, _, _, info = env.step(WARMS_UP_SLOWLY)  # its estimates fall as it warms: the plan grows
        assert info["correct"], info["feedback"]
    finally:
        env.close()
    assert len(sessions) == 2  # the reference's timing, the candidate's
    for sizes, scored, warmup_calls in sessions:
        warm, timed = sizes[:-scored], sizes[-scored:]
        assert warm[0] == 1 and sum(warm) == warmup_calls and len(warm) >= 2, sizes
        assert max(timed) <= max(warm), sizes


def test_every_burst_refills_the_same_input_buffers_with_new_content():
    """Call i of every burst reads the same addresses with fresh values (so an address-keyed cache hits for
    certain and answers stale); arguments that are not plain buffers of the same kind are made fresh."""
    import torch

    from pkb_env.ranks.bursts import Workload, make_sets

    def make(seeds):
        g = torch.Generator().manual_seed(seeds["world=0"] % (1 << 62))
        base = torch.randn(8, generator=g)
        return torch.randn(4, 4, generator=g), base[:4], seeds["world=0"] % 7

    workload = Workload(call=lambda *args: None, make=make)
    first = make_sets(workload, {"world=0": 11}, 3)
    pointers = [args[0].data_ptr() for args in first]
    second = make_sets(workload, {"world=0": 12}, 4, into=first)
    expected = make_sets(workload, {"world=0": 12}, 4)
    assert [args[0].data_ptr() for args in second[:3]] == pointers          # the same buffers ...
    for got, want in zip(second, expected):                                 # ... holding the new burst's values
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[2] == want[2]
    assert second[0][1] is not first[0][1]   # a view is never refilled: its storage may hold more than it shows


def test_wrong_in_one_call_of_eight_is_wrong_every_time(env2):
    """Issue 12's must-show: judged wrong in 20 steps out of 20 (one call in forty passed 7 of 8 with sampled checks;
    one in eight: 1 - (7/8)^3 = 33% caught a step by three sampled calls)."""
    env2.reset(options={"task": "all_reduce"})
    verdicts = []
    for _ in range(20):
        _, _, _, _, info = env2.step(NOW_AND_THEN)
        verdicts.append((info["verdict"], info["stage"]))
        assert "timed call" in info["feedback"], info["feedback"]
    assert verdicts == [("wrong", "time")] * 20


def test_a_cache_keyed_on_input_addresses_is_wrong(env2):
    env2.reset(options={"task": "all_reduce"})
    _, _, _, _, info = env2.step(ADDRESS_CACHE)
    assert info["verdict"] == "wrong" and info["stage"] == "time", info["feedback"]


def test_a_host_bound_candidate_is_charged_its_host_time(env2):
    env2.reset(options={"task": "all_reduce"})
    _, _, _, _, info = env2.step(HOST_BOUND)
    assert info["correct"], info["feedback"]
    t = info["record"].timing
    assert t.time_s >= 200e-6 and t.launch_s >= 200e-6, info["feedback"]


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


def test_the_allowance_comes_from_the_reference_and_has_a_floor():
    protocol = TimingProtocol.for_clock("host")
    assert clock_allowance(protocol, np.zeros((6, 2))) == protocol.clock_floor_s
    assert clock_allowance(protocol, np.full((6, 2), 0.01)) == pytest.approx(0.04)


def test_suspect_only_below_the_physical_floor():
    assert suspect_reason(10e-6, None) is None
    assert suspect_reason(10e-6, 5e-6) is None
    assert "below the physical floor" in suspect_reason(4e-6, 5e-6)


def test_the_release_page_is_the_judges_alone():
    page = ReleasePage()
    view = PageView(os.dup(page.fd))
    page.release(page.next_epoch())
    assert view.epoch() == 1
    fd = os.open(f"/proc/self/fd/{page.fd}", os.O_RDWR)
    import mmap
    with pytest.raises(PermissionError):
        mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"\x09", 0)
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)
    os.close(fd)
    page.close()


@pytest.mark.parametrize("n, critical", [(4, None), (5, 0), (8, 5), (10, 10), (20, 60)])
def test_the_speedup_interval_is_wilcoxons(n, critical):
    """The interval's ends are Walsh averages k in from either end, k - 1 the published critical value of the
    signed-rank statistic at 5% one-sided (Wilcoxon's table; none for n = 4)."""
    from pkb_env.judge.candidate import signed_rank_interval

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
    from pkb_env.judge.candidate import pseudo_median, signed_rank_interval

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


def test_the_speedup_is_the_pseudo_median_of_the_log_ratios():
    """The Hodges-Lehmann estimate (the median of the Walsh averages), taken in logs: a candidate against the
    reference reads the reciprocal of the reference against it, and one wild pair of ten moves it little."""
    from pkb_env.judge.candidate import pseudo_median

    assert pseudo_median(np.array([0.0, 1.0, 2.0, 10.0])) == pytest.approx(1.75)
    logs = np.log(np.array([1.02, 0.97, 1.05, 0.99, 1.01, 1.03, 0.98, 1.00, 1.04, 0.96]))
    assert math.exp(pseudo_median(-logs)) == pytest.approx(1 / math.exp(pseudo_median(logs)))
    wild = logs.copy()
    wild[0] = math.log(5.0)
    assert abs(math.exp(pseudo_median(wild)) - math.exp(pseudo_median(logs))) < 0.02


def test_a_speedup_whose_interval_straddles_the_target_does_not_end_the_episode():
    from pkb_env.episode import reached
    from pkb_env.record import EvaluationRecord, TimingResult, Verdict

    def record(speedup, low, high):
        timing = TimingResult(time_s=1e-3, statistic="interval-min", clock="host", median_s=1e-3, spread=0.1,
                              min_s=1e-3, max_s=1e-3, calls=10, warmup_calls=1, speedup=speedup,
                              speedup_low=low, speedup_high=high)
        return EvaluationRecord("all_reduce", 2, "tiny", "float32", "cpu", "cpu/x", verdict=Verdict.CORRECT,
                                timing=timing)

    assert not reached(record(1.04, 0.93, 1.12), 1.0) and not record(1.04, 0.93, 1.12).distinguishable_from(1.0)
    assert reached(record(1.3, 1.1, 1.5), 1.0) and record(1.3, 1.1, 1.5).distinguishable_from(1.0)
    assert reached(record(1.3, None, None), 1.0) and not reached(record(0.9, None, None), 1.0)



MOVES_OFF_ITS_CORE = """
import os, torch.distributed as dist
def solution(tensor):
    os.sched_setaffinity(0, {0, 1})   # every core this machine has, whichever the judge gave this rank
    out = tensor.clone()
    dist.all_reduce(out)
    return out
"""


def test_rank_r_of_every_rank_set_runs_on_one_core_and_a_candidate_that_leaves_it_fails(monkeypatch):
    """Where the placement gives each rank a core (GPUs: sandbox/cores.py), every thread of the candidate's rank r
    and of the reference's rank r runs there while they are timed, so a pair's two halves share the core's
    speed; a candidate that widens its affinity is caught at the next freeze, and its step fails."""
    import pkb_env.executors as executors
    from pkb_env.executors.placement import Placement

    pinned = lambda world_size: replace(cpu_placement(world_size), cpus=(1, 0))   # noqa: E731
    cpu_placement = executors.cpu_placement
    monkeypatch.setattr(executors, "cpu_placement", pinned)
    env = make_env(world_size=2, config=PRODUCTION, target_speedup=float("inf"))
    executor = judge_of(env).executor
    assert isinstance(executor.placement, Placement) and executor.placement.cpus == (1, 0)
    seen = []
    release = RankSet.release

    def spy_release(ranks, epoch):   # every rank gated, about to be timed
        seen.append((ranks.role, [{tid: os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}
                                  for pid in ranks.pids]))
        return release(ranks, epoch)

    monkeypatch.setattr(RankSet, "release", spy_release)
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        _, _, _, _, info = env.step(obs["reference"])
        assert info["correct"], info["feedback"]
        roles = {role for role, _ in seen}
        assert roles == {"candidate", "reference"}, roles
        for role, per_rank in seen:
            for rank, threads in enumerate(per_rank):
                assert all(cores == {(1, 0)[rank]} for cores in threads.values()), (role, rank, threads)
        _, _, _, _, info = env.step(MOVES_OFF_ITS_CORE)
        assert info["verdict"] == "runtime_error" and "moved off the cores" in info["feedback"], info["feedback"]
    finally:
        env.close()
