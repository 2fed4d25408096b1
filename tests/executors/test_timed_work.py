"""What the executor does around timed work, on CPU ranks (docs/timing.md): no rank set starts beside a burst, the
candidate is stopped while the reference replays its bursts, the warm-up grows bursts to their scored size, and
rank r of every rank set runs on one core.

What each test checks happens at a moment inside a step, between operations no public method returns from:
the judge's trace sink (`JudgeService(config, trace=sink)`, pkb_env/tracing.py) is called just before every
burst's release (`gate candidate`, `gate reference`), and two tests observe the executor there (its spares
and the candidate rank sets still ending: `executor.spares`, `executor.ending`). The others still need the
executor's internals, each docstring says why: the candidate's rank set (no public surface names it), the
moment of the reference's replay and of a fingerprint request, the size of each burst, a placement that
pins ranks on a machine whose placement does not. Keep such tests here, in tests/executors.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from conftest import PRODUCTION, cpu_judge
from pkb_env.executors.rank_set import RankSet
from pkb_env.executors.sessions import ReferenceRanks, Session
from pkb_env.task import load_task
from pkb_env.wire.messages import START_PHASES
from pkb_env.wire.requests import TaskWorkload

REFERENCE = load_task("all_reduce").reference_source


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


class Gates:
    """A trace sink that notes, at every burst's gate (the `gate <role>` operation ends just before the release),
    the role of the ranks about to be released and whether every spare in a phase of its start is stopped
    (`starting` and `_stopped`) and no ended candidate rank set is still coming down (`ending`); and, at each
    step's first candidate burst, how many spares wait and whether all of them are contained."""

    def __init__(self):
        self.executor = None   # the judge's, set once the judge is made
        self.seen: list[tuple[str, bool]] = []
        self.waiting: list[tuple[int, bool]] = []
        self._first = False

    def __call__(self, operation: str, seconds: float) -> None:
        executor = self.executor
        if operation == "candidate ranks":    # a step's candidate took its rank set; its bursts come next
            self._first = True
        if not operation.startswith("gate "):
            return
        quiet = all(_stopped(spare) for spare in executor.spares if spare.starting) and not executor.ending
        self.seen.append((operation.removeprefix("gate "), quiet))
        if operation == "gate candidate" and self._first:
            self._first = False
            self.waiting.append((len(executor.spares), all(s.cell.contained for s in executor.spares)))


def test_the_reference_is_timed_while_no_rank_is_starting():
    """The first step times the reference (and the cache keeps that time for every later step): the next
    candidate rank set, pre-started at reset, must have finished starting by then, so the judge's own
    start-up work does not run beside the reference's bursts."""
    gates = Gates()
    with cpu_judge(2, PRODUCTION, trace=gates) as judge:
        gates.executor = judge.executor
        judge.open("all_reduce")
        record = judge.judge("all_reduce", REFERENCE)
        assert record.correct, record.feedback
    reference = [quiet for role, quiet in gates.seen if role == "reference"]
    assert reference and all(reference), gates.seen


@pytest.mark.parametrize("depth", [1, 4])
def test_no_rank_set_starts_while_a_candidate_is_timed(depth):
    """Spares start, and move from one phase of their start to the next, only at untimed work, and every
    spare still in a phase is stopped when a burst is released: no rank makes its context or communicators
    beside a candidate's bursts, and no step waits for a phase to end. Spares wait beside a running candidate
    only where cells have their own namespaces (the candidate cannot reach them); elsewhere none exists until
    the candidate is gone. There, too, a step does not wait for its candidate's ranks to come down: they are
    killed with their namespace, and confirmed gone before the next burst."""
    gates = Gates()
    with cpu_judge(2, PRODUCTION.replace(spares=depth), trace=gates) as judge:
        executor = gates.executor = judge.executor
        if depth > 1 and executor.namespaces_missing:
            pytest.skip(f"spares wait beside a candidate only in cells with namespaces ({executor.namespaces_missing})")
        ended = []
        judge.open("all_reduce")
        last = len(START_PHASES) - 1
        for step in range(4):
            record = judge.judge("all_reduce", REFERENCE)
            assert record.correct, record.feedback
            if executor.namespaces_missing is None:   # told to end, not waited for; the step before's confirmed
                assert len(executor.ending) == 1 and not executor.ending[0].closed
                assert all(r.closed for r in ended)
                ended.append(executor.ending[0])
            assert len(executor.spares) == executor.spares.depth == depth  # started for the next steps
            assert all(not s.closed for s in executor.spares)
            asked = [s.asked for s in executor.spares]   # oldest first, none behind a younger one; a lone one whole
            assert asked == sorted(asked, reverse=True) and (depth > 1 or asked == [last]), asked
    assert gates.waiting == [(depth - 1, True)] * 4, gates.waiting
    candidate_bursts = [quiet for role, quiet in gates.seen if role == "candidate"]
    assert len(candidate_bursts) >= 4 * PRODUCTION.protocol.min_bursts and all(candidate_bursts), gates.seen


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
    (it cannot reach the reference's processes), else inside the freeze.

    Internals: the candidate's rank set is known only to the executor (`_candidate_ranks` is spied to learn it),
    and the moments looked at are the start of the reference's replay, of the candidate's next burst and of the
    reference's fingerprint request, before each operation (the trace sink is called after one)."""
    import psutil

    from pkb_env.sandbox import freezer

    judge = cpu_judge(2, PRODUCTION)
    executor = judge.executor
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
        judge.open("all_reduce")
        record = judge.judge("all_reduce", WITH_HELPERS)
        assert record.correct, record.feedback
        assert at_replay and all(stopped and all(stopped.values()) for stopped in at_replay), at_replay
        # the ranks, each rank's child, and the namespace's PID 1 where there is one
        assert all(len(stopped) >= 2 * 2 for stopped in at_replay), at_replay
        assert between and not any(any(now.values()) for now in between), between   # resumed
        assert len(at_fingerprints) == len(at_replay)
        assert not any(at_fingerprints) if taken[-1].cell.contained else all(at_fingerprints), at_fingerprints
        assert record.timing.pairs == len(at_replay) == len(record.timing.pair_ratios) >= 3
        assert record.timing.speedup_spread is not None
        assert min(record.timing.pair_ratios) <= record.speedup <= max(record.timing.pair_ratios)
        assert record.timing.cached_reference_s > 0 and record.speedup == record.timing.speedup
        assert record.reference.replay_s > 0 and record.timed_check.checked == record.timing.calls * 2
        if record.timing.pairs >= 5:   # the signed-rank interval exists, holds the speedup, and the feedback says it
            low, high = record.speedup_interval
            assert low <= record.speedup <= high and f"over {record.timing.pairs} paired bursts" in record.feedback
    finally:
        judge.close()


def test_no_scored_burst_is_longer_than_the_warm_up_bursts(monkeypatch):
    """The warm-up grows the bursts to the plan's upper size, so a scored burst never holds more outputs
    than the ranks held before (a fresh process's memory pool must not grow inside a timed burst).

    Internals: the number of calls in each burst is the timing loop's own (`run_bursts` and `Session.burst` are
    spied); the record keeps the totals only, and the trace sink names operations, not their sizes."""
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
    with cpu_judge(2, PRODUCTION) as judge:
        judge.open("all_reduce")
        record = judge.judge("all_reduce", WARMS_UP_SLOWLY)  # its estimates fall as it warms: the plan grows
        assert record.correct, record.feedback
    assert len(sessions) == 2  # the reference's timing, the candidate's
    for sizes, scored, warmup_calls in sessions:
        warm, timed = sizes[:-scored], sizes[-scored:]
        assert warm[0] == 1 and sum(warm) == warmup_calls and len(warm) >= 2, sizes
        assert max(timed) <= max(warm), sizes


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
    speed; a candidate that widens its affinity is caught at the next freeze, and its step fails.

    Internals: CPU ranks are not pinned (the placement of this machine gives no cores), so a pinning placement is
    put in its place (`executors.cpu_placement`), and the threads of each rank set are read at its release
    (`RankSet.release` is spied: the trace sink does not say which processes a burst releases)."""
    import pkb_env.executors as executors
    from pkb_env.executors.placement import Placement

    pinned = lambda world_size: replace(cpu_placement(world_size), cpus=(1, 0))   # noqa: E731
    cpu_placement = executors.cpu_placement
    monkeypatch.setattr(executors, "cpu_placement", pinned)
    judge = cpu_judge(2, PRODUCTION)
    executor = judge.executor
    assert isinstance(executor.placement, Placement) and executor.placement.cpus == (1, 0)
    seen = []
    release = RankSet.release

    def spy_release(ranks, epoch):   # every rank gated, about to be timed
        seen.append((ranks.role, [{tid: os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}
                                  for pid in ranks.pids]))
        return release(ranks, epoch)

    monkeypatch.setattr(RankSet, "release", spy_release)
    try:
        judge.open("all_reduce")
        record = judge.judge("all_reduce", REFERENCE)
        assert record.correct, record.feedback
        roles = {role for role, _ in seen}
        assert roles == {"candidate", "reference"}, roles
        for role, per_rank in seen:
            for rank, threads in enumerate(per_rank):
                assert all(cores == {(1, 0)[rank]} for cores in threads.values()), (role, rank, threads)
        record = judge.judge("all_reduce", MOVES_OFF_ITS_CORE)
        assert record.verdict.value == "runtime_error" and "moved off the cores" in record.feedback, record.feedback
    finally:
        judge.close()


class LanesStill:
    """A batch client's trace sink (LocalClient(trace=...): its own judge's operations): at every burst that judge
    releases, whether each verdicts-only lane of the batch (pkb_env/lanes.py) is still, as the judge's own spares
    must be: no spare of a lane in a phase of its start unless stopped, no candidate rank set of a lane coming
    down."""

    def __init__(self):
        self.client = None
        self.seen: list[bool] = []

    def __call__(self, operation: str, seconds: float) -> None:
        lanes = self.client._lanes if self.client is not None else None
        if not operation.startswith("gate ") or lanes is None:
            return
        self.seen.append(all(all(_stopped(s) for s in lane.executor.spares if s.starting) and not lane.executor.ending
                             for lane in lanes.services))


def test_nothing_of_a_batch_s_lanes_starts_while_its_correct_candidates_are_timed():
    """Issue 46: with the batch door, a correct candidate is timed while nothing else of the batch runs. The
    lanes finish their candidates first; then their spares, started at the end of each lane's step, must not
    make their contexts or import torch beside the timed bursts (held, as a judge holds its own, until the
    batch's timing is over)."""
    from pkb_env import LocalClient

    watch = LanesStill()
    wrong = "def solution(tensor):\n    return tensor.clone()\n"
    batch = [("all_reduce", wrong), ("all_reduce", REFERENCE), ("all_reduce", wrong), ("all_reduce", REFERENCE)]
    client = watch.client = LocalClient(PRODUCTION.replace(executor="cpu", world_size=2, verify_lanes=2), trace=watch)
    try:
        records = client.map(batch)
        assert [r.verdict.value for r in records] == ["wrong", "correct", "wrong", "correct"], records
        assert len(client._lanes.services) == 2
    finally:
        client.close()
    assert len(watch.seen) >= 2 * PRODUCTION.protocol.min_bursts and all(watch.seen), watch.seen
