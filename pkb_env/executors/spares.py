"""Spare candidate rank sets: pre-started so that a step rarely waits for one, and starting only while nothing
is timed (docs/timing.md, "The protocol": a candidate is timed while nothing starts either).

A starting rank makes its CUDA context or communicator or loads kernels, GPU and host work that must not run
beside a burst: `hold` stops every spare in the middle of a phase of its start before anything is timed, and
`free` lets them go on at the untimed work between bursts (the fingerprints of a pair) and once the step's
timing is over (`fill`). So a phase runs in the untimed parts of one step or several, and no step waits for
one. With one spare per phase and a ready one (GPU placements: five), phases of different spares run side by
side (each a fraction of a second of GPU and host work: docs/measurements/2026-12-01-timing-h200.md). With one
(CPU ranks, whose start is short, or cells without namespaces, where a spare beside a running candidate could
be reached by it: same uid) the spare is started whole once the candidate's timing is over (and, without
namespaces, once the candidate is gone).
"""
from __future__ import annotations

from typing import Callable, Iterator

from pkb_env.errors import JudgeError
from pkb_env.executors.rank_set import RankSet, RankSetFailed
from pkb_env.sandbox import freezer

# What a start that failed raises: the rank set's own account, a cell or a fork the host refused (EAGAIN),
# a zygote gone mid-request, containment that cannot be had. A spare's failure is the next step's to see.
START_FAILURES = (RankSetFailed, OSError, EOFError, TimeoutError, JudgeError)


class Spares:
    """An executor's pre-started candidate rank sets, oldest first, and the processes of those held while
    something is timed. Iterating gives the rank sets (for tests, diagnostics and the executor's sweeps)."""

    def __init__(self, start: Callable[[bool], RankSet], depth: int, freeze_timeout_s: float):
        """`start(hold)`: a new candidate rank set, waiting between the phases of its start for `free` (True)
        or started whole (False). `depth`: how many to keep."""
        self.start = start
        self.depth = depth
        self.freeze_timeout_s = freeze_timeout_s
        self._sets: list[RankSet] = []
        self._held: set[int] | None = None  # the starting spares' processes stopped for timed work (`hold`)

    def __iter__(self) -> Iterator[RankSet]:
        return iter(tuple(self._sets))

    def __len__(self) -> int:
        return len(self._sets)

    def take(self) -> RankSet | None:
        """The oldest spare that finishes its start, taken out; None when none does.

        A spare that died before it was used (killed, or out of memory; `alive` cannot see a death that is
        still on its way, and its `ready` may have been sent before: `ping`) is closed and the next one tried.
        """
        self.free()
        self._drop_dead()
        while self._sets:
            ranks = self._sets.pop(0)
            try:
                ranks.ping()
                return ranks
            except RankSetFailed:
                ranks.close()
        return None

    def first(self) -> None:
        """With no spare yet, one started whole (the first step's: a failure here is the caller's to see)."""
        if not self._sets:
            self._sets.append(self.start(False))

    def fill(self) -> None:
        """Let the spares run, move each one whose phase is over to its next, and start new ones up to `depth`
        (once a step's timing is over: a spare was used). A start that fails (START_FAILURES) is not the
        calling step's: its result stands, and the next step starts its own rank set or says why it cannot."""
        self._drop_dead()
        self.free()
        try:
            while len(self._sets) < self.depth:
                self._sets.append(self.start(self.depth > 1))
        except START_FAILURES:
            pass

    def hold(self) -> None:
        """Before anything is timed (a reference, a calibration, a candidate's burst): every spare in the middle
        of a phase of its start is stopped (SIGSTOP on its ranks and whatever they forked, each thread seen
        stopped: sandbox/freezer.py) until `free`; a spare whose phase is over waits idle for its next. A spare
        that failed to start, or cannot be stopped, is dropped; the next step starts another."""
        if self._held is not None:   # held since the last timed work; no phase has begun since
            return
        self._held = set()
        self._each(self._stop)

    def free(self) -> None:
        """Untimed work begins: the held spares go on, and each one whose phase is over begins its next."""
        self._resume()
        self._each(lambda ranks: ranks.advance() if ranks.phase_over() else None)

    def close(self) -> None:
        """The held spares resumed, then every spare closed."""
        self._resume()
        for ranks in self._sets:
            ranks.close()
        self._sets = []

    def _stop(self, ranks: RankSet) -> None:
        if not ranks.phase_over():
            self._held |= freezer.stop(lambda: freezer.descendants([ranks.cell.pid]), self.freeze_timeout_s)

    def _resume(self) -> None:
        if self._held:
            freezer.resume(self._held)
        self._held = None

    def _drop_dead(self) -> None:
        """Close spares that died (whoever ran before may have killed one, or its start failed)."""
        for ranks in [r for r in self._sets if not r.alive()]:
            ranks.close()
            self._sets.remove(ranks)

    def _each(self, step: Callable[[RankSet], None]) -> None:
        """`step` on every spare; one whose start failed meanwhile, or that cannot be stopped, is closed and
        dropped."""
        for ranks in list(self._sets):
            try:
                step(ranks)
            except (RankSetFailed, freezer.FreezeFailed):
                ranks.close()
                self._sets.remove(ranks)
