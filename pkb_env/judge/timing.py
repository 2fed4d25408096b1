"""The timing protocol: steady-state bursts, every count decided by the judge, every claim held to its clock.

What a training step feels is the time per call of a stream of calls with the host running ahead. A
burst (pkb_env/ranks/bursts.py) is K calls back to back between a start the judge releases on every
rank at once and an end event; its figure is the slowest rank's busy time / K. Bursts repeat until the
relative standard error of their figures is under `rse_target` or the budget ends (a candidate's, each paired
with the reference's replay: until the speedup's interval is narrow or a longer budget ends); the figure of
merit is the median burst figure (docs/timing.md has the protocol, its measured behaviour and its holes).

The judge decides everything a rank could lie about: K per burst (from its own clock, with a secret
jitter), how many bursts, which outputs come back in full, the fingerprint seeds. A rank's report of a
burst (when it saw the release, when it saw the end, how long its device was busy) is then checked
against the judge's own clock around that burst (`check_claims`): the time from the release to the
report, less the claimed busy time, is the overhead of reporting; an honest rank's overhead is what the
trusted reference showed, a forger's is larger by whatever it shaved off.
"""
from __future__ import annotations

import math
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from pkb_env.executors.interface import BurstRecord, TimedSession
from pkb_env.config import TimingProtocol
from pkb_env.judge.pair_stats import settled
from pkb_env.judge.seeds import SeedPlan
from pkb_env.record import TimingResult
from pkb_env.wire.requests import Rules, Workload


@dataclass(frozen=True)
class TimedWork:
    """What a timing session times: `workload` on inputs from `seeds`. With `rules` (the step's comparison
    checks as the ranks fingerprint them), every scored burst is fingerprinted; `capture_every`: the ranks
    copy every output as its call returns (ranks/bursts.timed_burst). `compare(burst, reference's fingerprints,
    candidate's)`, with pairs: per rank, the burst's calls that differ from the reference's replay
    (judge/verify.burst_differences), kept in the log (`BurstLog.differences`), so that the series stops once the
    step is known wrong (BurstSeries._known_wrong) and the check of every timed call does not compare them again."""

    workload: Workload
    seeds: SeedPlan
    rules: Rules | None = None
    capture_every: bool = False
    compare: Callable[[int, list[dict], list[dict]], list] | None = None


@dataclass
class CallLimits:
    """How many calls one burst may make, and all scored bursts together.

    Per burst: as many as the held inputs and outputs fit in `memory_fraction` of a rank's memory (sizes
    from the trusted reference). In all: as many as the reference can replay in `replay_budget_s` (every
    timed call is checked against the reference's replay of its inputs, so a candidate far faster than the
    reference, or one that does no work, must not buy the judge minutes of replay).
    """

    max_calls: int
    total_calls: int | None = None

    @classmethod
    def from_sizes(cls, protocol: TimingProtocol, input_bytes: int, output_bytes: int, memory_bytes: int,
                   reference_s: float | None = None) -> "CallLimits":
        budget = protocol.memory_fraction * memory_bytes
        most = max(1, min(protocol.max_calls, int(min(budget / max(1, input_bytes), budget / max(1, output_bytes)))))
        if not reference_s:
            return cls(most)
        total = max(protocol.min_calls * protocol.min_bursts, int(protocol.replay_budget_s / reference_s))
        return cls(max(1, min(most, total // protocol.min_bursts)), total)


@dataclass
class BurstLog:
    """Everything the judge observed of one timing session (scored bursts only, warm-up left out)."""

    bursts: list[BurstRecord] = field(default_factory=list)
    seeds: list[list[dict[str, int]]] = field(default_factory=list)         # per burst, per rank: base seeds
    fingerprint_seeds: list[int] = field(default_factory=list)
    samples: list[list[int]] = field(default_factory=list)
    fingerprints: list[list[dict]] = field(default_factory=list)             # per burst, per rank
    differences: list[list] = field(default_factory=list)   # per paired burst: TimedWork.compare's, per rank
    warmup_calls: int = 0
    wall_s: float = 0.0
    stopped_wrong: bool = False   # the series stopped at a burst whose calls differed from the reference's replay

    statistic: str = "burst-median"

    def figures(self) -> np.ndarray:
        """Per burst, its figure by `statistic`:

        burst-median  the slowest rank's busy time / calls: the stream's time per call, stalls included
                      (device clocks: a host that stalls is charged, as a training step would feel it)
        interval-min  the fastest of the burst's mark intervals, per call, the slowest rank's per interval
                      (CPU ranks time-slice cores shared with everything else on the machine; scheduling
                      only ever adds time, and on a loaded machine most intervals carry some: the median of
                      per-burst minima repeats across steps far better than the median interval;
                      docs/measurements/2026-12-01-timing-cpu.md)
        """
        if self.statistic == "interval-min":
            return np.array([min(_intervals(b)) for b in self.bursts], dtype=np.float64)
        return np.array([max(r.busy_s for r in b.ranks) / b.calls for b in self.bursts], dtype=np.float64)


@dataclass(frozen=True)
class PairedBurst:
    """What the reference's half of a pair replays: the candidate's scored burst `burst`, its calls on the
    same seeds, and the fingerprint seed and sample the judge drew for it."""

    burst: int
    seeds: list[dict[str, int]]
    calls: int
    marks_every: int
    fingerprint_seed: int
    sample: list[int]


class PairHalf(Protocol):
    """The reference's half of each pair (judge/reference.Pairing)."""

    seconds: float   # its part so far, measured where it is spent
    log: BurstLog    # its timed halves so far, one per scored burst of the candidate

    def timed(self, paired: PairedBurst) -> None:
        """The reference's timed burst on the candidate's inputs, every process of the candidate stopped."""

    def fingerprints(self, paired: PairedBurst) -> Callable[[], None]:
        """Start fingerprinting the reference's half; the function returned waits for the result."""


def run_bursts(session: TimedSession, work: TimedWork, protocol: TimingProtocol, limits: CallLimits,
               budget_s: float, pair: PairHalf | None = None) -> BurstLog:
    """Warm up, then time bursts until the figures settle or the budget ends (module docstring).

    With `work.rules`, every scored burst is followed by a fingerprint request with a fresh secret seed.
    Warm-up bursts are not: their outputs count for nothing, and fingerprinting them cost about a quarter
    of a GPU step's timing (docs/timing.md). A rank learns that a burst was scored only after it, when its
    outputs exist; and from the first scored burst on, every burst is checked. `pair` times the reference's half
    next to each scored burst (right after the burst, or just before it, alternately), then both halves are
    fingerprinted (the reference's while the candidate's are made, where `pair` allows); the reference's part
    counts in neither the budget nor the log's wall time. Pairing needs `work.rules` (the replay is
    fingerprinted alike).
    """
    if pair is not None and work.rules is None:
        raise ValueError("pairing needs the rules of every timed call's check")
    return BurstSeries(session, work, protocol, limits, pair).run(budget_s)


class BurstSeries:
    """One timing session's bursts (`run_bursts`): the warm-up, then the scored bursts, each planned from the
    judge's own estimate of a call's time, with its fingerprints and the reference's half of its pair."""

    def __init__(self, session: TimedSession, work: TimedWork, protocol: TimingProtocol, limits: CallLimits,
                 pair: PairHalf | None):
        self.session, self.work, self.protocol, self.limits, self.pair = session, work, protocol, limits, pair
        self.rng = random.SystemRandom()
        self.log = BurstLog(statistic=protocol.statistic)
        self.marks = max(1, protocol.marks)
        self._passed = self._failed = False   # a timed call passed / failed the check so far (`_known_wrong`)

    def run(self, budget_s: float) -> BurstLog:
        started = time.monotonic()
        planned, ceiling, estimate = self._warm_up()
        self._scored(planned, ceiling, estimate, budget_s)
        self.log.wall_s = time.monotonic() - started - self._paired_s()
        return self.log

    def _warm_up(self) -> tuple[int, int, float]:
        """Bursts at the plan's largest size until the plan stops growing; (calls planned, the most calls of a
        scored burst, the last estimate of a call's time).

        No scored burst is then longer than a warm-up burst was (the ceiling), so none holds more outputs than
        the rank has held before: a fresh rank set's memory pool (cudaMalloc, page faults) grows in the warm-up,
        not inside a scored burst, as it would when the plan grows while a process warms up (a fresh candidate
        rank set beside a long-lived reference one)."""
        protocol, most = self.protocol, self.limits.max_calls
        estimate = self._per_call(self._burst(1, "warmup", 0, scored=False))
        planned = _clamp(protocol.burst_s / estimate, self._least(estimate), most)
        ceiling = most if protocol.warmup_bursts == 0 else 1
        for w in range(protocol.warmup_bursts):
            calls = _clamp(planned * (1 + protocol.jitter), self._least(estimate), most)
            if calls <= ceiling:
                break
            estimate = self._per_call(self._burst(calls, "warmup", w + 1, scored=False))
            ceiling = calls
            planned = _clamp(protocol.burst_s / estimate, self._least(estimate), most)
        return min(planned, ceiling), ceiling, estimate

    def _scored(self, planned: int, ceiling: int, estimate: float, budget_s: float) -> None:
        """Scored bursts, each of a jittered size around the plan, until `_enough`."""
        protocol, log = self.protocol, self.log
        started = time.monotonic()
        estimates = [estimate]
        while len(log.bursts) < protocol.max_bursts:
            low = min(ceiling, self._least(float(np.median(estimates))))
            calls = _clamp(planned * self.rng.uniform(1 - protocol.jitter, 1 + protocol.jitter), low, ceiling)
            estimates.append(self._per_call(self._burst(calls, "timed", len(log.bursts), scored=True)))
            planned = _clamp(protocol.burst_s / float(np.median(estimates)), low, ceiling)
            if self._enough(started, budget_s, ceiling):
                break

    def _enough(self, started: float, budget_s: float, ceiling: int) -> bool:
        """A wrong step (`_known_wrong`): at once. After `min_bursts`: unpaired, the figures settled (their
        relative standard error under `rse_target`) or the budget is spent; paired, the speedup's 90% interval
        narrowed to `interval_target` (pair_stats.settled) or `interval_budget_s` is spent (docs/timing.md, "How
        many pairs"). At any count: one more burst could pass the calls the reference may replay."""
        protocol, log = self.protocol, self.log
        if self._known_wrong():
            log.stopped_wrong = True
            return True
        total = self.limits.total_calls
        if total is not None and sum(b.calls for b in log.bursts) + ceiling > total:
            return True
        figures = log.figures()
        if len(figures) < protocol.min_bursts:
            return False
        spent = time.monotonic() - started - self._paired_s()
        if self.pair is None:
            return relative_standard_error(figures) < protocol.rse_target or spent > budget_s
        return (settled(self.pair.log.figures() / figures, protocol.interval_target)
                or spent > max(budget_s, protocol.interval_budget_s or 0.0))

    def _known_wrong(self) -> bool:
        """Whether the last paired burst has calls that differ from the reference's replay, and the series holds a
        call that passed (or `min_bursts` bursts): the step is wrong whatever more pairs would show, and the check
        of the timed calls can still tell the agent what the failing calls' data held that a passing call's did
        not (judge/timed_causes.py: a series stopped at a burst whose every call failed would give it nothing to
        compare with)."""
        if not self.log.differences:   # unpaired, or nothing compared (`_fingerprint` compares each paired burst)
            return False
        calls = self.log.bursts[-1].calls
        compared = self.log.differences[-1]
        unreadable = any(not isinstance(found, list) for found in compared)   # a rank's ChannelError: all failed
        failed = set(range(calls)) if unreadable else {call for found in compared for call, _ in found}
        self._passed = self._passed or len(failed) < calls
        self._failed = self._failed or bool(failed)
        return self._failed and (self._passed or len(self.log.bursts) >= self.protocol.min_bursts)

    def _burst(self, calls: int, purpose: str, index: int, scored: bool) -> BurstRecord:
        """One burst of `calls` calls on the plan's inputs for (`purpose`, `index`); a scored one fingerprinted,
        and paired with the reference's half."""
        seeds = [per_rank[0] for per_rank in self.work.seeds.per_rank(purpose, [index])]
        marks_every = max(1, -(-calls // self.marks))
        checked = self.work.rules is not None and scored
        if checked:   # drawn now, told to the ranks only after their burst (the fingerprints' request)
            seed = secrets.randbits(62)
            sample = [self.rng.randrange(calls)] if len(self.log.bursts) < self.protocol.samples else []
        # The pair's order alternates (ABBA: the candidate first in even pairs, the reference in odd ones), so
        # that whatever favours the second of two bursts cancels over the pairs; the halves are adjacent.
        paired = (PairedBurst(len(self.log.bursts), seeds, calls, marks_every, seed, sample)
                  if self.pair is not None and checked else None)
        if paired is not None and paired.burst % 2 == 1:
            self.pair.timed(paired)
        record = self.session.burst(self.work.workload, seeds, calls, marks_every, self.work.capture_every)
        if paired is not None and paired.burst % 2 == 0:
            self.pair.timed(paired)
        if checked:
            self._fingerprint(seed, sample, paired)
        if scored:
            self.log.bursts.append(record)
            self.log.seeds.append(seeds)
        else:
            self.log.warmup_calls += calls
        return record

    def _fingerprint(self, seed: int, sample: list[int], paired: PairedBurst | None) -> None:
        """The last burst's fingerprints with `seed` (and the reference's half's, where it is paired)."""
        finish = self.pair.fingerprints(paired) if paired is not None else None
        try:
            self.log.fingerprints.append(self.session.fingerprints(len(self.log.bursts), seed, self.work.rules,
                                                                   sample))
        finally:   # the reference's answer is read even where the candidate's failed: none is left unread
            if finish is not None:
                finish()
        self.log.fingerprint_seeds.append(seed)
        self.log.samples.append(sample)
        if paired is not None and self.work.compare is not None:   # both halves' fingerprints are in: compared once
            self.log.differences.append(self.work.compare(paired.burst, self.pair.log.fingerprints[-1],
                                                          self.log.fingerprints[-1]))

    def _paired_s(self) -> float:
        """The reference's part so far (its halves of the pairs): counted in neither the budget nor the log's
        wall time."""
        return self.pair.seconds if self.pair is not None else 0.0

    @staticmethod
    def _per_call(record: BurstRecord) -> float:
        """The judge's own estimate: wall time from release to the last report, per call."""
        return max(1e-7, (max(r.received for r in record.ranks) - record.released) / record.calls)

    def _least(self, estimate: float) -> int:
        """`min_calls`, unless that many calls would take more than 4 bursts' time (slow tasks on CPU ranks)."""
        protocol = self.protocol
        return max(1, min(protocol.min_calls, self.limits.max_calls, int(4 * protocol.burst_s / estimate)))


def _clamp(calls: float, least: int, most: int) -> int:
    return max(1, least, min(most, int(round(calls))))


def relative_standard_error(values: np.ndarray) -> float:
    if len(values) < 2 or float(np.mean(values)) <= 0:
        return math.inf
    return float(np.std(values, ddof=1) / math.sqrt(len(values)) / np.mean(values))


def overheads(log: BurstLog) -> np.ndarray:
    """Per burst and rank: the judge's time from release to report, less the claimed busy and idle time."""
    return np.array([[(r.received - b.released) - r.busy_s - (r.idle_s or 0.0) for r in b.ranks]
                     for b in log.bursts], dtype=np.float64)


def clock_allowance(protocol: TimingProtocol, reference_overheads: np.ndarray) -> float:
    """How much reporting overhead an honest rank may show (from the trusted reference's bursts)."""
    observed = float(np.percentile(reference_overheads, 90)) if reference_overheads.size else 0.0
    return max(protocol.clock_floor_s, protocol.clock_factor * observed)


def paired_allowance(protocol: TimingProtocol, reference_halves: BurstLog) -> np.ndarray:
    """Per pair: `clock_factor` x the largest reporting overhead of the reference's half (its ranks, timed by
    the same clock next to the candidate's burst): what an honest rank's reports may take under the load of
    that moment (`check_claims`'s `paired`)."""
    over = overheads(reference_halves)
    return protocol.clock_factor * over.max(axis=1) if over.size else np.zeros(0)


@dataclass
class ClaimCheck:
    problem: str | None     # why the reports cannot be believed (an exploit flag), or None
    allowance_s: float
    margin_s: float         # the smallest, over ranks, of the largest room left in any burst (>= 0: believed)
    claim_ratio: float      # smallest claimed busy time / the judge's wall time, over bursts and ranks
    rank: int = -1          # the rank whose reports the problem is about


def check_claims(log: BurstLog, allowance_s: float, relative: float = 0.0,
                 paired: np.ndarray | None = None) -> ClaimCheck:
    """Hold every rank's reports to the judge's clock (module docstring).

    A burst's report is impossible when its times fall outside the judge's own window (seen before the
    release, busy longer than release-to-report, a mark count the judge did not ask for): that alone is
    a forgery. Otherwise a rank's overhead (release-to-report less what it claims) may exceed
    `allowance_s + relative * wall` in some bursts (the machine was busy), never in all of them: a rank
    that shaved time off its claims shaved it off every burst, and even its least-delayed burst shows it.
    `paired` (per burst): the allowance the reference's own half of that burst's pair shows (clock_factor x its
    largest overhead; `paired_allowance`), where it is larger: a host loaded for the whole step delays the
    trusted reference's reports next to each burst as much as an honest candidate's, where the allowance from
    the reference's timing at the task's open does not know of that load.
    """
    over = overheads(log)
    walls = np.array([[r.received - b.released for r in b.ranks] for b in log.bursts], dtype=np.float64)
    allowed = np.full((len(log.bursts), 1), allowance_s)
    if paired is not None and len(paired) == len(log.bursts):
        allowed = np.maximum(allowed, np.asarray(paired, dtype=np.float64).reshape(-1, 1))
    room = allowed + relative * walls - over               # per burst and rank; < 0: more overhead than allowed
    best = room.max(axis=0) if room.size else np.zeros(1)
    ratios = [r.busy_s / max(1e-9, r.received - b.released) for b in log.bursts for r in b.ranks]
    problem, culprit = None, -1
    for b, record in enumerate(log.bursts):
        for rank, r in enumerate(record.ranks):
            wall = r.received - record.released
            slack = max(1e-4, 0.01 * wall)
            if len(r.marks) != record.calls // record.marks_every:
                culprit = rank
                problem = f"rank {rank} reported {len(r.marks)} marks of burst {b}; the judge asked for " \
                          f"{record.calls // record.marks_every}"
            elif r.busy_s < 0 or r.busy_s > wall + slack or not (record.released - slack <= r.seen_at <= r.ended_at
                                                                 <= r.received + slack):
                culprit = rank
                problem = (f"rank {rank} reported a burst the judge's clock rules out (burst {b}: busy "
                           f"{r.busy_s * 1e3:.3f} ms, seen {1e3 * (r.seen_at - record.released):.3f} ms and ended "
                           f"{1e3 * (r.ended_at - record.released):.3f} ms after the release, reported after "
                           f"{wall * 1e3:.3f} ms)")
    if problem is None and float(best.min()) < 0:
        rank = culprit = int(np.argmin(best))
        problem = (f"rank {rank}'s timing reports claim at least {float(np.min(over[:, rank])) * 1e3:.3f} ms less "
                   f"per burst than the judge's clock saw between release and report, in every burst; an honest "
                   f"rank's reporting takes at most {allowance_s * 1e3:.3f} ms + {relative:.0%} of the burst"
                   + (" (or what the reference's own reports took next to the same burst)" if paired is not None
                      else ""))
    return ClaimCheck(problem, allowance_s, float(best.min()), min(ratios) if ratios else 1.0, culprit)


def summarize(log: BurstLog, clock: str) -> TimingResult:
    """The timing record of a session: median burst figure, spread, per-call percentiles, launch cost."""
    figures = log.figures()
    median = float(np.median(figures))
    p10, p90 = np.percentile(figures, [10, 90])
    intervals = [x for b in log.bursts for x in _intervals(b)]
    pct = dict(zip(("p10", "p50", "p90", "p99"), (float(x) for x in np.percentile(intervals, [10, 50, 90, 99]))))
    launch = float(np.median([max(r.host_s for r in b.ranks) / b.calls for b in log.bursts]))
    idles = [max(r.idle_s for r in b.ranks) for b in log.bursts if b.ranks[0].idle_s is not None]
    calls = sum(b.calls for b in log.bursts)
    return TimingResult(time_s=median, statistic=log.statistic, clock=clock, median_s=median,
                        spread=float((p90 - p10) / median) if median > 0 else 0.0, min_s=float(figures.min()),
                        max_s=float(figures.max()), calls=calls, warmup_calls=log.warmup_calls, input_sets=calls,
                        bursts=len(figures), rse=relative_standard_error(figures), per_call=pct, launch_s=launch,
                        idle_s=float(np.median(idles)) if idles else None, wall_s=log.wall_s)


def _intervals(b: BurstRecord) -> list[float]:
    """Per-call time of every interval between marks of one burst, the slowest rank's per interval."""
    per_rank = []
    for r in b.ranks:
        points = [0.0, *r.marks, r.busy_s]
        sizes = [b.marks_every] * len(r.marks) + [b.calls - b.marks_every * len(r.marks)]
        per_rank.append([(points[i + 1] - points[i]) / n for i, n in enumerate(sizes) if n > 0])
    return [max(values) for values in zip(*per_rank)] or [max(r.busy_s for r in b.ranks) / b.calls]


def suspect_reason(time_s: float, floor_s: float | None) -> str | None:
    """Hard evidence only: a time below the physical floor (the task's cost at datasheet peaks)."""
    if floor_s and time_s < floor_s:
        return (f"{time_s * 1e6:.2f} us per call is below the physical floor of {floor_s * 1e6:.2f} us (the bytes "
                f"that must move, at the datasheet's peak bandwidth)")
    return None


def escaped_work(timing: TimingResult, reference: TimingResult, hidden_work_s: float) -> str | None:
    """Device work still running after a burst's end event, far beyond the reference's: it escaped the timing."""
    if timing.idle_s is None or reference.idle_s is None:
        return None
    if timing.idle_s > 2 * reference.idle_s + hidden_work_s:
        return (f"the device stayed busy {timing.idle_s * 1e6:.0f} us after the end of each burst on the caller's "
                f"stream (reference: {reference.idle_s * 1e6:.0f} us): work on unjoined streams or threads "
                f"is not credited")
    return None
