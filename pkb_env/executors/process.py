"""The process executor: rank processes on this host, placed on CPU or GPUs by a Placement.

One class serves every local placement (cpu over gloo, cuda over NCCL, cuda-emulated over gloo on fewer
GPUs); what differs between them is data (placement.py), not code paths. It implements the executor
interface (interface.py) and owns:
  * the zygote (torch imported once; each rank set is a forked cell with its own namespaces, whose ranks
    are forks of it),
  * the trusted reference rank set, reused across steps (it never runs candidate code),
  * candidate rank sets, one per step, pre-started (spares.py) so that a step rarely waits for one, starting
    in phases while nothing is timed and stopped while something is (docs/timing.md),
  * build cells, one per build of a candidate's kernels (builds.py; the compile service is judge/compiler.py).
The choreography of spares (spares.py), retries and sweeps stays behind it: a caller asks for a session and
gets one.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from pkb_env.config import JudgeConfig
from pkb_env.errors import JudgeError
from pkb_env.executors import builds
from pkb_env.executors.interface import Services
from pkb_env.executors.placement import ExecutorInfo, Placement
from pkb_env.executors.rank_set import RankSet, RankSetFailed
from pkb_env.executors.sessions import CandidateRanks, ReferenceRanks
from pkb_env.executors.spares import Spares
from pkb_env.record import RankFailure
from pkb_env.sandbox import cores, freezer
from pkb_env.sandbox.containment import Containment
from pkb_env.sandbox.limits import kill_tree
from pkb_env.sandbox.privileges import remove_files_of, unprivileged_uid
from pkb_env.sandbox.variables import rank_environment
from pkb_env.sandbox.zygote import Zygote
from pkb_env.tracing import Tracer
from pkb_env.wire.services import BuildRequest

T = TypeVar("T")


class ProcessExecutor:
    def __init__(self, info: ExecutorInfo, placement: Placement, config: JudgeConfig,
                 extra_env: dict[str, str] | None = None, reference_placement: Placement | None = None):
        """No process starts here: `prestart`, or the first session, starts them."""
        self.info = info
        self.placement = placement
        # The reference may run elsewhere (emulated ranks: on CPU over gloo, which every collective supports).
        self.reference_placement = reference_placement or placement
        self.config = config
        self.env = rank_environment(extra_env)
        self.root = tempfile.mkdtemp(prefix="pkb-env-")
        os.chmod(self.root, 0o711)  # unprivileged ranks may enter their own directories below it, not list it
        # Gone with the executor, or at exit when nobody closed it (a failed start must not litter /tmp).
        self._zygotes: list = []  # the zygote processes started, for the finalizer (it may not hold self)
        self._interrupted = threading.Event()   # interrupt(): waits that may take long (builds) stop
        self._remove_root = weakref.finalize(self, _remove_at_exit, self.root, self._zygotes)
        # progress(role, phase, ranks_done, world_size) as ranks report (the CLI's progress line); None: silent
        self.progress: Callable[[str, str, int, int], None] | None = None
        self.tracer = Tracer()  # where a step's time goes (pkb_env/tracing.py): silent unless given a sink
        self.containment = Containment.of(config)
        self.namespaces_missing = self.containment.missing()
        self.candidate_uid, self.privileges = unprivileged_uid(allowlisted_root=self.namespaces_missing is None,
                                                               drop=config.drop_privileges)
        self._warned = False  # about running without namespaces: once per executor
        self._zygote: Zygote | None = None
        self._reference: RankSet | None = None
        self._ending: list[RankSet] = []  # contained candidate rank sets told to end, not yet confirmed gone
        depth = config.spares or placement.spares
        self.spares = Spares(lambda hold: self._start("candidate", hold=hold),
                             depth if self.namespaces_missing is None else 1, config.freeze_timeout_s)

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    @property
    def ending(self) -> tuple[RankSet, ...]:
        """The contained candidate rank sets told to end and not yet confirmed gone (for tests and diagnostics)."""
        return tuple(self._ending)

    @property
    def zygote(self) -> Zygote:
        if self._zygote is None or not self._zygote.alive():
            self._zygote = Zygote(self.env, self.config.start_timeout_s, cache=self.config.cache_dir, root=self.root,
                                  gpu=self.placement.gpu)
            self._zygotes.append(self._zygote.process)
        return self._zygote

    # -- sessions ----------------------------------------------------------------------------------
    @contextmanager
    def candidate(self, services: Services | None = None, deadline: float | None = None) -> Iterator[CandidateRanks]:
        """Fresh ranks for one candidate (interface.py); every process of them is gone when the block ends."""
        with self.tracer.span("candidate ranks"):
            ranks = self._candidate_ranks()
        ranks.services, ranks.hard_deadline = services, deadline
        session = None
        try:
            session = CandidateRanks(ranks, self._before_timing, self.spares.free, self.tracer, self._end_timing,
                                     self._frozen, self._protection(ranks))
            yield session
        finally:
            try:
                with self.tracer.span("release"):
                    self._release(ranks)
            finally:
                if session is not None and not session.timing_ended:   # nothing timed, or its timing failed
                    self._spares_go_on()

    def reference(self, task: str | None, work: Callable[[ReferenceRanks], T], retry: bool = True) -> T:
        """`work` on the reference ranks with `task` loaded; once more on fresh ranks if they died (`retry`:
        not for work on what the ranks hold from before, a replay's outputs).

        Reference ranks never run candidate code, but a candidate that ran as the same user may have killed
        them during its step; the reference only works while no candidate process is alive or running
        (`_frozen`), or while the candidate is contained (it cannot reach them), so a fresh rank set cannot be
        reached. A second failure is the judge's own: JudgeError.
        """
        attempts = 2 if retry else 1
        for attempt in range(1, attempts + 1):
            session = ReferenceRanks(self._reference_ranks(), self._before_timing, self.spares.free, self.tracer)
            try:
                session.ranks.wait_ready()
                session.load(task)
                return work(session)
            except RankSetFailed as exc:
                self.discard_reference()
                if attempt == attempts:
                    raise JudgeError(f"the reference failed: {exc}") from exc
        raise AssertionError("unreachable")

    def _candidate_ranks(self) -> RankSet:
        """A fresh rank set for one candidate, started and ready to load it: the oldest spare that finishes
        its start (Spares.take), else a new one.

        No candidate code has run in it yet, so a start that fails is never the candidate's: a new rank set
        is started up to `fresh_starts` times (a host briefly out of processes or threads answers EAGAIN).
        After that, JudgeError: the judge's to report.
        """
        spare = self.spares.take()
        if spare is not None:
            return spare
        failure: Exception | None = None
        for attempt in range(self.config.fresh_starts):
            if attempt:
                time.sleep(self.config.fresh_start_pause_s)
            try:
                ranks = self._start("candidate", hold=False)
            except (OSError, EOFError, TimeoutError) as exc:  # the host refused a cell or a fork
                failure = exc
                continue
            try:
                ranks.wait_ready()
                return ranks
            except RankSetFailed as exc:
                ranks.close()
                failure = exc
        raise JudgeError(f"the candidate's ranks failed to start: {failure}") from failure

    # -- timed work ----------------------------------------------------------------------------------
    def _before_timing(self) -> None:
        """Before anything is timed (a reference, a calibration, a candidate's burst): the candidate rank sets
        told to end are gone (their contexts coming down would compete with the ranks being timed), and every
        spare in a phase of its start is stopped (Spares.hold) until the next untimed work (Spares.free)."""
        with self.tracer.span("settle"):
            self._confirm_ended()
            self.spares.hold()

    def hold(self) -> None:
        """Another judge on this machine is about to time (a batch's correct candidates, after this judge gave
        verdicts on its lane: pkb_env/lanes.py): nothing of this judge starts or comes down beside it either, as
        before this judge's own timed work (`_before_timing`), until `release`."""
        self._before_timing()

    def release(self) -> None:
        """The other judge's timed work is over: the held spares go on with their starts (Spares.free)."""
        self.spares.free()

    @contextmanager
    def _frozen(self, ranks: RankSet) -> Iterator[None]:
        """Every process of a candidate rank set stopped for the block (sandbox/freezer.py): under its cell,
        and without namespaces whatever the zygote adopted too (a process that left its tree). One that
        cannot be stopped in `freeze_timeout_s` (it keeps forking) fails the candidate's step."""
        def processes() -> set[int]:
            found = freezer.descendants([ranks.cell.pid])
            if not ranks.cell.contained:
                strays = self._strays(ranks)
                found |= strays | freezer.descendants(strays)
            return found

        with self.tracer.span("freeze"):
            try:
                stopped = freezer.stop(processes, self.config.freeze_timeout_s)
            except freezer.FreezeFailed as exc:
                raise RankSetFailed([RankFailure(0, "unfreezable", f"the candidate's processes could not be stopped "
                                                                  f"while the reference was timed: {exc}", "timing")])
            moved = self._off_cores(ranks)
        if moved:   # its calls ran on other cores than the reference's: the pair's ratio would not cancel them
            freezer.resume(stopped)
            raise RankSetFailed([RankFailure(0, "unpinned", f"the candidate moved off the cores the judge gave its "
                                                            f"ranks: {moved}", "timing")])
        try:
            yield
        finally:
            freezer.resume(stopped)

    def _off_cores(self, ranks: RankSet) -> str | None:
        """Where a thread of rank r's processes may run beyond rank r's core (`placement.cpus`), in words."""
        for rank, pid in enumerate(ranks.pids if self.placement.cpus else ()):
            found = cores.off_cores([pid, *freezer.descendants([pid])], {self.placement.cpus[rank]})
            if found:
                return f"rank {rank}'s {found}"
        return None

    def _strays(self, candidate: RankSet | None = None) -> set[int]:
        """The zygote's children that are not the cell of a live rank set (or of `candidate`): processes that
        left a cell without namespaces."""
        if self._zygote is None or not self._zygote.alive():
            return set()
        import psutil

        live = {r.cell.pid for r in (self._reference, *self.spares, candidate) if r is not None and not r.closed}
        try:
            return {c.pid for c in psutil.Process(self._zygote.pid).children() if c.pid not in live}
        except psutil.Error:
            return set()

    def _kill_contained(self, ranks: RankSet) -> None:
        """Kill a contained rank set with its namespace, not waiting, once (a set retired after its timing is
        released at the step's end). First off the ranks' cores (`placement.cpus`): its processes' end runs
        where they are, and the next step's rank r, already pinned to rank r's core, would share it with the
        teardown of this set's CUDA contexts (docs/measurements/2026-12-03-timing-h200.md)."""
        if ranks.cell.ending:
            return
        if self.placement.cpus:
            rest = os.sched_getaffinity(0) - set(self.placement.cpus)
            if rest:
                cores.move([ranks.cell.pid, *freezer.descendants([ranks.cell.pid])], rest)
        ranks.retire()

    def _release(self, ranks: RankSet) -> None:
        """End a candidate rank set for good, and everything it left behind.

        A contained one is told to end and confirmed gone later (`_confirm_ended`: before anything is timed
        next, and when the executor is asked what runs or closes): the kernel kills every process of its
        namespace whatever they do, so none runs candidate code again, and the step need not wait while their
        CUDA contexts come down (docs/measurements/2026-12-02-symmetric-memory-and-throughput-h200.md, "Where a
        failing step's time goes"). An uncontained one is ended and
        swept now."""
        if ranks.cell.contained and not ranks.closed:
            self._kill_contained(ranks)
            self._ending.append(ranks)
        else:
            self._end(ranks)

    def _confirm_ended(self) -> None:
        """Wait until every candidate rank set told to end is gone (their cells reaped, directories removed)."""
        while self._ending:
            self._ending.pop(0).close()

    def _end_timing(self, ranks: RankSet) -> None:
        """A candidate's timed work is over (its last pair): its ranks are killed now (`_release` confirms the
        end later), then the spares move on.

        A contained rank set is told to end and not waited for: the kernel kills its processes with its
        namespace, and their CUDA contexts (a tenth of a second or more: docs/measurements/2026-12-01-timing-h200.md)
        come down meanwhile.
        An uncontained one is ended and swept at once. So nothing of it can reach a spare that starts now.
        """
        with self.tracer.span("end"):
            if ranks.cell.contained and not ranks.closed:
                self._kill_contained(ranks)
            else:
                self._end(ranks)
        self._spares_go_on()

    def _spares_go_on(self) -> None:
        """The step's last timed work is over (the candidate's last pair, or a step that timed nothing): the
        spares go on with their starts and new ones begin (Spares.fill)."""
        with self.tracer.span("spares"):
            self.spares.fill()

    def _end(self, ranks: RankSet) -> None:
        ranks.close()
        if not ranks.cell.contained:  # a contained rank set took everything with it: nothing to sweep
            self.sweep()

    def sweep(self, seconds: float = 1.0) -> None:
        """Kill whatever the zygote adopted that is not the cell of a live rank set.

        Only needed for rank sets without namespaces (a contained one cannot leave anything). The zygote
        is a subreaper: a candidate's process that outlived its cell (detached daemons, a process that
        keeps forking and exiting to stay ahead of a tree walk) ends up its child, and the time-bounded
        scan below may lose that race. Files the candidate uid left in the shared temporary directories go too.
        """
        if self._zygote is None or not self._zygote.alive():
            return
        deadline = time.monotonic() + seconds  # bounded: a process that forks and exits faster than we scan
        first = True                           # can outrun this (a PID namespace cannot be outrun)
        while time.monotonic() < deadline:
            strays = list(self._strays())
            if not strays:
                break
            if first:
                kill_tree(strays, timeout=0.5)
                first = False
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self._zygote.drain()
        if self.candidate_uid is not None:
            remove_files_of(self.candidate_uid, ("/tmp", "/dev/shm", "/var/tmp"))

    # -- builds, start, reference --------------------------------------------------------------------
    def build(self, job: BuildRequest, timeout: float) -> builds.BuildOutcome:
        """One build of a candidate's kernels in a build cell of its own (builds.py); none once interrupted (the
        ranks of a step ask for the same build one after another, and the next one would start a new zygote)."""
        if self._interrupted.is_set():
            return builds.BuildOutcome(False, None, builds.STOPPED, "", False)
        cell = builds.BuildCell(lambda: self.zygote, self.containment, self.root, self.candidate_uid, self.env,
                                self.config, self._warn_if_uncontained, self.sweep, self._interrupted.is_set)
        return builds.build(cell, job, timeout)

    def prestart(self) -> None:
        """Start the zygote, the reference rank set and the spare candidate rank sets now (their ranks make
        their CUDA contexts and communicators in parallel), so the first step need not wait for them."""
        self._reference_ranks()
        self.spares.first()
        self.spares.fill()

    def reference_facts(self) -> list[dict]:
        """What the reference ranks said of themselves at their start (context, group and warm-up times, the
        clock and gate they use), once they are ready: for benchmarks and diagnostics."""
        ranks = self._reference_ranks()
        ranks.wait_ready()
        return [dict(f) for f in ranks.facts]

    def _reference_ranks(self) -> RankSet:
        if self._reference is None or not self._reference.alive():
            if self._reference is not None:
                self._reference.close()
            self._reference = RankSet(self.zygote, self.reference_placement, self.config, self.env, "reference",
                                      root=self.root, containment=self.containment, progress=self._report_progress)
        return self._reference

    def discard_reference(self) -> None:
        """Drop the reference rank set after a failure; the next request starts a new one."""
        if self._reference is not None:
            self._reference.close()
            self._reference = None

    def _start(self, role: str, hold: bool) -> RankSet:
        ranks = RankSet(self.zygote, self.placement, self.config, self.env, role, root=self.root,
                        uid=self.candidate_uid, containment=self.containment, progress=self._report_progress,
                        hold=hold)
        self._warn_if_uncontained(ranks.cell.contained, ranks.cell.isolation)
        return ranks

    def _report_progress(self, role: str, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(role, phase, done, total)

    def _warn_if_uncontained(self, contained: bool, isolation: dict[str, str]) -> None:
        if not contained and not self._warned:
            self._warned = True
            warnings.warn(f"candidate code runs without namespaces here ({isolation['pid']}): a candidate's files "
                          f"in /tmp and fast-forking processes can outlive its step, and it sees the host's files "
                          f"(privileges: {self.privileges}). Set PKB_ENV_REQUIRE_CONTAINMENT=1 to refuse instead.",
                          RuntimeWarning, stacklevel=4)

    # -- what the executor holds ---------------------------------------------------------------------
    def isolation(self) -> dict[str, str]:
        """What containment candidate ranks get here (it depends on privileges and the platform).

        Keys: pid, network, filesystem (in words), visible (the host paths a rank can see, where there is an
        allowlisted root), user (where a user namespace was needed), privileges.
        """
        if not any(not r.closed for r in self.spares):
            self.prestart()
        return {**next(r for r in self.spares if not r.closed).cell.isolation, "privileges": self.privileges}

    def _protection(self, ranks: RankSet) -> dict[str, str]:
        """What protects the judge while `ranks` run: their cell's isolation and the privileges (for the record)."""
        return {**{k: v for k, v in ranks.cell.isolation.items() if k != "visible"}, "privileges": self.privileges}

    def directory_bytes(self) -> int:
        """Bytes in files under the executor's directory (for tests and leak checks)."""
        total = 0
        for base, _, files in os.walk(self.root):
            for name in files:
                try:
                    total += os.lstat(os.path.join(base, name)).st_size
                except OSError:
                    pass
        return total

    def process_ids(self) -> list[int]:
        """Every live process this executor owns (for tests and leak checks), once the ends it was told of are
        confirmed."""
        import psutil

        self._confirm_ended()
        if self._zygote is None or not self._zygote.alive():
            return []
        root = psutil.Process(self._zygote.pid)
        return [root.pid] + [c.pid for c in root.children(recursive=True)]

    def interrupt(self) -> None:
        """Kill the zygotes, from any thread: every cell, rank and build dies with them (parent-death signals), so
        a step in progress on another thread fails at its next wait, and a build's wait ends within a quarter
        second (a compile's answer could be a minute away: closing a judge mid-build waited for it, 43 s on the
        2-core machine); `close` removes what is left."""
        self._interrupted.set()
        for process in self._zygotes:
            if process.poll() is None:
                process.kill()

    def close(self) -> None:
        self._confirm_ended()
        self.spares.close()
        if self._reference is not None:
            self._reference.close()
        self._reference = None
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        self._remove_root()

    def __enter__(self) -> "ProcessExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _remove_at_exit(root: str, zygotes: list) -> None:
    """The finalizer's work when nobody closed the executor: end the zygotes first (every cell and rank dies
    with its zygote, by parent-death signals), so that no starting rank writes into `root` while it goes."""
    for process in zygotes:
        if process.poll() is None:
            process.kill()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    for _ in range(20):  # the ranks' parent-death signals land within milliseconds of their zygote's end
        shutil.rmtree(root, ignore_errors=True)
        if not os.path.exists(root):
            return
        time.sleep(0.05)
