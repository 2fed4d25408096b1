"""The process executor: rank processes on this host, placed on CPU or GPUs by a Placement.

One class serves every local placement (cpu over gloo, cuda over NCCL, cuda-emulated over gloo on fewer
GPUs); what differs between them is data (devices, backend, limits, whether times mean anything), not
code paths. It owns:
  * the zygote (torch imported once; each generation is a forked cell with its own namespaces, whose
    ranks are forks of it),
  * the trusted reference generation, reused across steps (it never runs candidate code),
  * candidate generations, one per step, pre-started (spares) so that a step rarely waits for one,
  * build cells, one per build of a candidate's kernels (the compile service's, judge/compiler.py).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
import weakref
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Callable

from pkb_env.executors import channel
from pkb_env.executors.environment import rank_environment
from pkb_env.executors.generation import Generation, GenerationFailed, Placement
from pkb_env.executors.isolation import remove_files_of, unprivileged_uid
from pkb_env.executors.limits import ResourceLimits, describe_status, kill_tree
from pkb_env.executors.zygote import Containment, Zygote


# A build's process (builder.py): limits per compiler process; processes for the candidate uid (ninja's jobs);
# the largest answer (a shared object) the judge reads.
BUILD_LIMITS = ResourceLimits(file_size_bytes=512 << 20, open_files=1024, address_space_bytes=16 << 30,
                              cpu_seconds=600)
BUILD_PROCESSES = 256
FRESH_STARTS = 2            # tries at a new candidate generation when no spare could be used
FRESH_START_PAUSE_S = 1.0   # between them
MAX_BUILD_BYTES = 256 << 20
BUILD_SIGNALS = {"SIGXCPU": "its CPU-time limit", "SIGKILL": "out of memory or a limit",
                 "SIGXFSZ": "a file over its size limit", "SIGSEGV": "a crash of the compiler or of the build's code"}


@dataclass(frozen=True)
class BuildOutcome:
    """What a build cell returned: the bytes, or the compiler's messages (unfiltered: the judge filters)."""

    ok: bool
    payload: bytes | None
    log: str
    workdir: str   # the build's directory, as it appears in the compiler's messages
    contained: bool


@dataclass(frozen=True)
class ExecutorInfo:
    name: str                      # "cpu" | "cuda" | "cuda-emulated"
    hardware: str                  # fingerprint used as the key of cached reference times and calibrations
    performance_available: bool    # False when ranks time-slice one device: times would mean nothing
    topology: str                  # name of the topology config (configs/topologies/<name>.yaml)


class ProcessExecutor:
    def __init__(self, info: ExecutorInfo, placement: Placement, start_timeout: float = 120.0,
                 extra_env: dict[str, str] | None = None, reference_placement: Placement | None = None):
        self.info = info
        self.placement = placement
        # The reference may run elsewhere (emulated ranks: on CPU over gloo, which every collective supports).
        self.reference_placement = reference_placement or placement
        self.start_timeout = start_timeout
        self.env = rank_environment(extra_env)
        self.root = tempfile.mkdtemp(prefix="pkb-env-")
        os.chmod(self.root, 0o711)  # unprivileged ranks may enter their own directories below it, not list it
        # Gone with the executor, or at exit when nobody closed it (a failed start must not litter /tmp).
        self._zygotes: list = []  # the zygote processes started, for the finalizer (it may not hold self)
        self._remove_root = weakref.finalize(self, _remove_at_exit, self.root, self._zygotes)
        # progress(role, phase, ranks_done, world_size) as ranks report (the CLI's progress line); None: silent
        self.progress: Callable[[str, str, int, int], None] | None = None
        self.containment = Containment.from_environment()
        self.namespaces_missing = self.containment.missing()
        self.candidate_uid, self.privileges = unprivileged_uid(allowlisted_root=self.namespaces_missing is None)
        self._warned = False  # about running without namespaces: once per executor
        self._zygote: Zygote | None = None
        self._reference: Generation | None = None
        # Pre-started candidate generations, oldest first (see _fill_spares).
        self._spares: list[Generation] = []
        self.spare_depth = placement.spares if self.namespaces_missing is None else 1

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    @property
    def zygote(self) -> Zygote:
        if self._zygote is None or not self._zygote.alive():
            self._zygote = Zygote(self.env, self.start_timeout)
            self._zygotes.append(self._zygote.process)
        return self._zygote

    def candidate_generation(self) -> Generation:
        """A fresh generation for one candidate, started and ready to load it: the oldest spare that
        finishes its start, else a new one (end it with `retire` or `release`, which move the spares on).

        No candidate code has run in it yet, so a start that fails is never the candidate's: a spare that
        died before it was used (killed, or out of memory; `alive` cannot see a death that is still on its
        way, and its `ready` may have been sent before: `ping`) is closed and the next one tried, and a new
        generation is started up to `FRESH_STARTS` times (a host briefly out of processes or threads
        answers EAGAIN). GenerationFailed (or the OSError of a cell that cannot be made) after that: the
        judge's to report.
        """
        self._drop_dead_spares()
        while self._spares:
            gen = self._spares.pop(0)
            try:
                gen.ping(self.start_timeout)
                return gen
            except GenerationFailed:
                gen.close()
        for attempt in range(FRESH_STARTS):
            if attempt:
                time.sleep(FRESH_START_PAUSE_S)
            gen = self._start("candidate", hold=False)
            try:
                gen.wait_ready(self.start_timeout)
                return gen
            except GenerationFailed as exc:
                gen.close()
                failure = exc
        raise failure

    def _drop_dead_spares(self) -> None:
        """Close spares that died (whoever ran before may have killed one, or its start failed)."""
        for gen in [g for g in self._spares if not g.alive()]:
            gen.close()
            self._spares.remove(gen)

    def _fill_spares(self) -> None:
        """Move every spare one phase of its start on and start new ones up to `spare_depth`.

        Called only once a timing is over: a starting rank makes its CUDA context or communicator or loads
        kernels, GPU and host work beside any burst, and `settle` waits for the running phases before the
        next bursts. With one spare per phase and a ready one (GPU placements: four), each phase of a
        start has the time between two timings to itself, and phases of different spares run side by
        side, so a step back to back waits only for the longest phase beyond that time (on one H200 the
        context took 0.42-0.57 s, the process group 0.40-0.52 s, the warm-up 0.20-0.44 s; the time
        between two timings is about 0.4 s: docs/timing.md). With one (CPU ranks, whose start is short,
        or cells without namespaces, where a spare beside a running candidate could be reached by it:
        same uid) the spare is started whole once the candidate's timing is over (and, without
        namespaces, once the candidate is gone). A failure to start is not the calling step's: its result
        stands, and the next step starts its own generation or says why it cannot.
        """
        self._drop_dead_spares()
        self._each_spare(lambda gen: gen.advance(self.start_timeout))
        try:
            while len(self._spares) < self.spare_depth:
                self._spares.append(self._start("candidate", hold=self.spare_depth > 1))
        except Exception:  # noqa: BLE001
            pass

    def settle(self, timeout: float) -> None:
        """Wait until no spare is in the middle of a phase of its start, before anything is timed (a
        reference, a calibration, a candidate's bursts): its ranks make CUDA contexts and communicators,
        the judge's own work, competing for the cores and the GPU with the ranks being timed. A spare that
        fails to start is dropped; the next step starts another."""
        self._each_spare(lambda gen: gen.settle(timeout))

    def _each_spare(self, step: Callable[[Generation], None]) -> None:
        """`step` on every spare; one whose start failed meanwhile is closed and dropped."""
        for gen in list(self._spares):
            try:
                step(gen)
            except GenerationFailed:
                gen.close()
                self._spares.remove(gen)

    def retire(self, gen: Generation) -> None:
        """Kill a candidate generation now and start the next spares; `release` confirms the end later.

        A contained generation is told to end and not waited for: the kernel kills its processes with its
        namespace, and their CUDA contexts (0.14-0.16 s on one H200, docs/timing.md) come down while the
        judge checks the timed outputs. An uncontained one is ended and swept at once.

        Spares move on here (`_fill_spares`), once the candidate's timing is over.
        """
        if gen.cell.contained and not gen.closed:
            gen.retire()
        else:
            self._end(gen)
        self._fill_spares()

    def release(self, gen: Generation) -> None:
        """End a candidate generation for good (waiting until it is gone) and everything it left behind;
        the spares move on here unless `retire` moved them (once per step: a spare forked at `retire` is
        still making its contexts, and advancing it now would wait for them)."""
        retired = gen.cell.ending or gen.closed
        self._end(gen)
        if not retired:
            self._fill_spares()

    def _end(self, gen: Generation) -> None:
        gen.close()
        if not gen.cell.contained:  # a contained generation took everything with it: nothing to sweep
            self.sweep()

    def sweep(self, seconds: float = 1.0) -> None:
        """Kill whatever the zygote adopted that is not the cell of a live generation.

        Only needed for generations without namespaces (a contained one cannot leave anything). The
        zygote is a subreaper: a candidate's process that outlived its cell (detached daemons, a process
        that keeps forking and exiting to stay ahead of a tree walk) ends up its child, and the time-bounded
        scan below may lose that race. Files the candidate uid left in the shared temporary directories go too.
        """
        if self._zygote is None or not self._zygote.alive():
            return
        import psutil

        live = {gen.cell.pid for gen in (self._reference, *self._spares) if gen is not None and not gen.closed}
        root = psutil.Process(self._zygote.pid)
        deadline = time.monotonic() + seconds  # bounded: a process that forks and exits faster than we scan
        first = True                           # can outrun this (a PID namespace cannot be outrun)
        while time.monotonic() < deadline:
            try:
                strays = [c.pid for c in root.children() if c.pid not in live]
            except psutil.Error:
                return
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

    def build(self, job: dict, timeout: float) -> BuildOutcome:
        """Run one build (builder.py) in a fresh build cell and return what it produced.

        The cell is contained like a generation (namespaces, the allowlisted root with the toolchain, a
        private tmpfs as the build's directory), the build runs as the candidate uid under BUILD_LIMITS,
        and `timeout` seconds of wall-clock time; then the cell ends, with everything the build started.
        """
        workdir = tempfile.mkdtemp(prefix="pkb-build-", dir=self.root)
        uid = self.candidate_uid
        owner = (uid, uid) if uid is not None else (os.geteuid(), os.getegid())
        os.chown(workdir, *owner)
        cell = self.zygote.cell(workdir, self.containment, kind="build", owner=owner)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._warn_if_uncontained(cell.contained, cell.isolation)
            env = {**self.env, "HOME": workdir, "TMPDIR": workdir, "TORCH_EXTENSIONS_DIR": workdir,
                   "MAX_JOBS": str(min(4, os.cpu_count() or 1))}
            spec = {"role": "build", "workdir": workdir, "env": env, "limits": asdict(BUILD_LIMITS), "uid": uid,
                    "max_processes": BUILD_PROCESSES}
            pid = cell.spawn(spec, theirs.fileno())
            theirs.close()
            conn = Connection(os.dup(ours.fileno()))
            try:
                channel.send(conn, job)
                header, payload = channel.recv(conn, time.monotonic() + timeout, MAX_BUILD_BYTES)
            except channel.ChannelTimeout:
                return BuildOutcome(False, None, f"the build took longer than {timeout:.0f} s and was stopped",
                                    workdir, cell.contained)
            except (channel.ChannelClosed, OSError):
                status = describe_status(cell.status_of(pid, wait=2.0))
                why = next((f" ({text})" for name, text in BUILD_SIGNALS.items() if status.endswith(name)), "")
                return BuildOutcome(False, None, f"the build process {status}{why}", workdir, cell.contained)
            except channel.ChannelError as exc:
                return BuildOutcome(False, None, f"the build answered unreadably ({exc})", workdir, cell.contained)
            finally:
                conn.close()
            if header.get("event") != "built" or (header.get("ok") and not payload):
                return BuildOutcome(False, None, "the build answered out of protocol", workdir, cell.contained)
            return BuildOutcome(bool(header.get("ok")), payload if header.get("ok") else None,
                                str(header.get("log", "")), workdir, cell.contained)
        finally:
            theirs.close()
            ours.close()
            cell.close()
            if not cell.contained:
                self.sweep()
            shutil.rmtree(workdir, ignore_errors=True)

    def prestart(self) -> None:
        """Start the zygote, the reference generation and the spare candidate generations now (their ranks
        make their CUDA contexts and communicators in parallel), so the first step need not wait for them."""
        self.reference_generation()
        if not self._spares:  # the first step's, started whole (a failure here is the caller's to see)
            self._spares.append(self._start("candidate", hold=False))
        self._fill_spares()

    def reference_generation(self) -> Generation:
        if self._reference is None or not self._reference.alive():
            if self._reference is not None:
                self._reference.close()
            self._reference = Generation(self.zygote, self.reference_placement, self.env, "reference", root=self.root,
                                         containment=self.containment, progress=self._report_progress)
        return self._reference

    def discard_reference(self) -> None:
        """Drop the reference generation after a failure; the next request starts a new one."""
        if self._reference is not None:
            self._reference.close()
            self._reference = None

    def _start(self, role: str, hold: bool) -> Generation:
        gen = Generation(self.zygote, self.placement, self.env, role, root=self.root, uid=self.candidate_uid,
                         containment=self.containment, progress=self._report_progress, hold=hold)
        self._warn_if_uncontained(gen.cell.contained, gen.cell.isolation)
        return gen

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

    def isolation(self) -> dict[str, str]:
        """What containment candidate ranks get here (it depends on privileges and the platform).

        Keys: pid, network, filesystem (in words), visible (the host paths a rank can see, where there is an
        allowlisted root), user (where a user namespace was needed), privileges.
        """
        if not any(not gen.closed for gen in self._spares):
            self.prestart()
        return {**next(g for g in self._spares if not g.closed).cell.isolation, "privileges": self.privileges}

    def protection(self, gen: Generation) -> dict[str, str]:
        """What protects the judge while `gen` runs: its cell's isolation and the privileges (for the record)."""
        return {**{k: v for k, v in gen.cell.isolation.items() if k != "visible"}, "privileges": self.privileges}

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
        """Every live process this executor owns (for tests and leak checks)."""
        import psutil

        if self._zygote is None or not self._zygote.alive():
            return []
        root = psutil.Process(self._zygote.pid)
        return [root.pid] + [c.pid for c in root.children(recursive=True)]

    def close(self) -> None:
        for gen in (*self._spares, self._reference):
            if gen is not None:
                gen.close()
        self._spares, self._reference = [], None
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
