"""`JudgeService`: the judge's core (docs/architecture.md, "The service"); every door reaches it through one client.

    from pkb_env import JudgeConfig, JudgeService
    with JudgeService(JudgeConfig(executor="cpu", world_size=4)) as judge:
        task = judge.open("all_reduce")        # a TaskSession: prompt, reference, topology, spec
        record = task.judge(code)              # an EvaluationRecord, the reward not yet applied
        judge.judge("all_gather", code)        # shorthand for one-off calls

The service owns the executor and its processes, the reference's cached times, the compile cache and
the calibration. The doors (pkb_env/entrypoints/: the Gymnasium env, the TRL reward, the trainer adapters, the
OpenEnv server, the CLI) reach it through a client (pkb_env/client.py: a LocalClient holds one service on a
thread of its own; a JudgePool one per Ray actor), which uses the methods below and nothing under them, as
vLLM's engine clients use its engine core; the benchmarks use it directly. A record crosses processes as JSON
(`record.to_dict()`, `EvaluationRecord.from_dict`).

One service judges one step at a time; its timings are meant to be the only work on its GPUs (or cores).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pkb_env.config import JudgeConfig
from pkb_env.contract import TaskError
from pkb_env.executors import make_executor
from pkb_env.executors.placement import ExecutorInfo
from pkb_env.judge.calibration import calibrate
from pkb_env.judge.pipeline import Judge
from pkb_env.prompt import Hardware
from pkb_env.record import EvaluationRecord, TimingResult
from pkb_env.signals import signals_held
from pkb_env.task import TaskSpec, load_task, runnable_tasks, size_problem
from pkb_env.tracing import Sink
from pkb_env.topology import Calibration, calibration_path, load_calibration, load_topology, save_calibration
from pkb_env.wire.services import BuildRequest


class JudgeService:
    """The judge, configured by one `JudgeConfig` (see the module docstring).

    Making one starts nothing: the first `open` starts the rank processes (in the background: the first
    step need not wait for them) and, with `calibration="auto"`, measures the machine where no calibration
    of it is cached. `progress(role, phase, ranks_done, world_size)` is called as ranks start and work (the
    CLI's status line); `trace(operation, seconds)` after each operation of a step (pkb_env/tracing.py). `close()` (or leaving the `with` block) stops every process and removes every file.

    `recorder`: called after every step the service judges (`evaluate`, and `screen` where that decides the
    step) as `recorder.record(record, completion, prompt, config=..., topology=...)`: the record, the action
    as given, the session's turn-0 prompt (one user message), this service's JudgeConfig and topology
    config's name. `pkb_env.data.EpisodeRecorder` is one (a dataset row per step: docs/data.md); callers
    that know more (the chat they sent, turns, episodes) call a recorder themselves instead.
    """

    def __init__(self, config: JudgeConfig | None = None, progress: Callable[[str, str, int, int], None] | None = None,
                 trace: Sink | None = None, recorder=None):
        self.config = config or JudgeConfig()
        self.recorder = recorder   # pkb_env.data.Recorder: the class docstring
        # the executor, exposed for tests and diagnostics of the processes; callers use the methods below
        self.executor = make_executor(self.config)   # ExecutorError (a ValueError) when the machine cannot
        self.executor.progress = progress
        self.executor.tracer.sink = trace            # `trace(operation, seconds)`: pkb_env/tracing.py
        self.protocol = self.config.protocol_for(self.executor.placement.clock)
        self.topology = load_topology(self.executor.info.topology)
        # what the prompt says of this machine (pkb_env/prompt.py)
        self.hardware = Hardware(self.executor.info.name, self.config.world_size, self.topology,
                                 self.executor.placement.gpu, self.protocol.statistic)
        self._judge = Judge(self.executor, self.config, self.protocol, self.topology)
        self._calibration_known = False

    # -- what it is --------------------------------------------------------------------------------
    @property
    def info(self) -> ExecutorInfo:
        """The executor in words: name, hardware fingerprint, whether times mean anything, topology config."""
        return self.executor.info

    @property
    def world_size(self) -> int:
        return self.config.world_size

    def tasks(self, preset: str | None = None, dtype: str | None = None) -> list[str]:
        """The suite as it runs here: every task that takes this world size at `preset` in `dtype` (default:
        the config's) and whose reference and outputs this executor can judge at that size."""
        return runnable_tasks(self.world_size, preset or self.config.preset, dtype or self.config.dtype,
                              self.executor.reference_placement.on_cpu)

    def problem(self, task: TaskSpec, preset: str | None = None, dtype: str | None = None) -> str | None:
        """Why `task` cannot be judged here at `preset` and `dtype`, with the fix, or None."""
        return size_problem(task, self.world_size, preset or self.config.preset, dtype or self.config.dtype,
                            self.executor.reference_placement.on_cpu)

    # -- the door ------------------------------------------------------------------------------------
    def open(self, task: str, preset: str | None = None, dtype: str | None = None,
             prestart: bool = True) -> "TaskSession":
        """A session on `task` (TaskError naming the fix when it cannot be judged here). `prestart`: start the
        rank processes now, so that the first step need not wait (False for a prompt alone)."""
        spec = load_task(task)   # TaskError naming the closest tasks
        problem = self.problem(spec, preset, dtype)
        if problem:
            raise TaskError(problem)
        preset = preset or self.config.preset
        calibration = self.calibration() if prestart else self._cached_calibration()
        if prestart:
            self.executor.prestart()
        return TaskSession(self, spec, preset, spec.resolve_dtype(preset, dtype or self.config.dtype), calibration,
                           self.hardware)

    def judge(self, task: str, code: object, preset: str | None = None, dtype: str | None = None) -> EvaluationRecord:
        """One-off: `open(task, ...).judge(code)`."""
        return self.open(task, preset, dtype).judge(code)

    def evaluate(self, session: "TaskSession", code: object) -> EvaluationRecord:
        """Judge `code` on an open session's task (TaskSession.judge calls this)."""
        return self._recorded(session, code, self._judge.evaluate(session.spec, code, session.preset, session.dtype))

    def screen(self, session: "TaskSession", code: object) -> EvaluationRecord | None:
        """Parse and screen `code` alone, starting nothing: its finished record where that decides it
        (unparsable, flagged), else None (it must be run: `session.judge`). For refusing bad files at once."""
        record = self._judge.screen(session.spec, code, session.preset, session.dtype)
        return record if record is None else self._recorded(session, code, record)

    def record(self, task: str, code: object, record: EvaluationRecord) -> EvaluationRecord:
        """Hand `record` of a step of `task` that another judge decided (a verdicts-only lane of a batch:
        pkb_env/lanes.py) to this service's recorder, as if this service had judged it."""
        session = self.open(task, record.preset, record.dtype, prestart=False)
        return self._recorded(session, code, record)

    def hold(self) -> None:
        """Another judge on this machine times now (the batch's correct candidates after this judge's verdicts on
        a lane: pkb_env/lanes.py): this judge's spares, mid-start, are stopped and its ended rank sets confirmed
        gone, as before its own timed work, until `release`."""
        self.executor.hold()

    def release(self) -> None:
        """That timing is over: this judge's spares go on starting."""
        self.executor.release()

    def _recorded(self, session: "TaskSession", code: object, record: EvaluationRecord) -> EvaluationRecord:
        if self.recorder is not None:
            self.recorder.record(record, code, session.prompt, config=self.config, topology=self.info.topology)
        return record

    # -- calibration and the reference -----------------------------------------------------------------
    def calibration(self) -> Calibration | None:
        """The calibration in force: cached for this hardware and world size, else (config.calibration "auto")
        measured now; None where nothing is measured (one rank, or times that mean nothing here)."""
        if not self._calibration_known:
            cal = self._cached_calibration()
            if cal is None and self.config.calibration == "auto" and self.measurable:
                cal = self.calibrate()
            self._set_calibration(cal)
        return self._judge.calibration

    def calibrate(self) -> Calibration:
        """Measure latency, bus bandwidth and the machine's peaks now (judge/calibration.py), cache and use them."""
        if not self.config.timing:
            raise TaskError("nothing to calibrate: this judge gives verdicts only (timing=False); calibrate with "
                            "a judge whose timing is on")
        if not self.measurable:
            raise TaskError(f"nothing to calibrate at world size {self.world_size} on {self.info.name}: "
                            f"calibrate with 2 or more ranks, on an executor that measures times")
        sizes = self.config.calibration_sizes or self.executor.placement.calibration_sizes
        cal = calibrate(self.executor, self.protocol, sizes)
        save_calibration(self.config.cache_dir, cal)
        self._set_calibration(cal)
        return cal

    def calibration_path(self) -> str:
        """Where this machine's calibration at this world size is cached."""
        return str(calibration_path(self.config.cache_dir, self.info.hardware, self.world_size, self.protocol.statistic))

    def reference_timing(self, task: str, preset: str | None = None, dtype: str | None = None) -> TimingResult:
        """The reference's time per call for `task` here, as the speedups of this service divide by it:
        measured once per task, size, dtype and world size, then cached."""
        session = self.open(task, preset, dtype)
        ctx = self._judge.context(session.spec, session.preset, session.dtype)
        return self._judge.reference_timing(ctx).result

    def forget_reference_timing(self, task: str | None = None) -> None:
        """Measure the reference's time again at the next step of `task` (None: of every task), e.g. when
        something else loaded the machine while it was measured."""
        self._judge.reference.forget(task)

    def restart_reference(self) -> None:
        """Fresh reference ranks at the next step, and its times measured again: after a change of the machine,
        or where candidates run as the reference's user (no namespaces) and may have reached its processes."""
        self.executor.discard_reference()
        self._judge.reference.forget(None)

    def prebuild(self, request: BuildRequest, until: float | None = None) -> str | None:
        """Build one extension or kernel ahead of the steps that will ask for it (`request`: what pkb_env.runtime
        sends, e.g. runtime.kernels.extension_request's), through the compile service
        and its cache, as a step's rank would: None when built (or cached), else the refusal or the compiler's
        messages. `until` (time.monotonic()): the build is stopped then, as a step's are at its deadline. For batch
        runs (benchmarks/pkb_corpus.py); several services over one cache_dir build in parallel, each one at a time."""
        header, _ = self._judge.kernels.handle({"event": "request", **request.message()}, until)
        return None if header.get("ok") else header.get("error", "failed")

    @property
    def compile_requests(self) -> int:
        """Compile requests the ranks of this service's steps made (cache hits included)."""
        return self._judge.kernels.requests

    def _cached_calibration(self) -> Calibration | None:
        if not self.measurable:
            return None
        return load_calibration(self.config.cache_dir, self.info.hardware, self.world_size, self.protocol.statistic)

    @property
    def measurable(self) -> bool:
        """Whether a calibration means anything here: times are real, taken (JudgeConfig.timing) and there is a
        link between ranks (W >= 2)."""
        return self.world_size >= 2 and self.info.performance_available and self.config.timing

    def _set_calibration(self, cal: Calibration | None) -> None:
        self._judge.calibration, self._calibration_known = cal, True

    # -- processes -----------------------------------------------------------------------------------
    def prestart(self) -> None:
        """Start the rank processes now (reference and spares), without opening a task."""
        self.executor.prestart()

    def isolation(self) -> dict[str, str]:
        """What containment candidate ranks get here, in words (starts the processes if none run)."""
        return self.executor.isolation()

    def process_ids(self) -> list[int]:
        """Every live process of the service (for leak checks)."""
        return self.executor.process_ids()

    def directory(self) -> str:
        """The directory every file of the service's processes lies under, removed at close (for leak checks)."""
        return self.executor.root

    def directory_bytes(self) -> int:
        """Bytes in the files the service's processes hold on disk now (for leak checks)."""
        return self.executor.directory_bytes()

    def reference_facts(self) -> list[dict]:
        """What each reference rank said of itself when it started (its context, group and warm-up times, its
        clock and gate), once they are ready: for benchmarks and diagnostics."""
        return self.executor.reference_facts()

    def interrupt(self) -> None:
        """Kill every process of the judge now, from any thread: the step in progress on another thread fails
        fast (its record is nobody's), and `close` then finishes the work (LocalClient.close)."""
        self.executor.interrupt()

    def close(self) -> None:
        """Stop every rank process and remove the executor's files. Ctrl-C and SIGTERM arriving meanwhile are
        held until it is done (then raised as usual), so an impatient second Ctrl-C cannot leave half of it."""
        with signals_held():
            self.executor.close()

    def __enter__(self) -> "JudgeService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class TaskSession:
    """One task on one service: what a model is shown, and the door to judge its code.

    `service` is None for a preview (`TaskSession.preview`): the prompts a machine that is not here would show
    (`pkb-env show --topology`), built by the same code as a service's; it judges nothing."""

    service: JudgeService | None
    spec: TaskSpec
    preset: str
    dtype: str
    calibration: Calibration | None
    hardware: Hardware

    @classmethod
    def preview(cls, hardware: Hardware, spec: TaskSpec, preset: str, dtype: str | None = None,
                calibration: Calibration | None = None) -> "TaskSession":
        """`spec` as `hardware` would show it (TaskError where that machine could not judge it: the problem a
        service there would name)."""
        problem = size_problem(spec, hardware.world_size, preset, dtype, hardware.executor != "cuda")
        if problem:
            raise TaskError(problem)
        return cls(None, spec, preset, spec.resolve_dtype(preset, dtype), calibration, hardware)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def world_size(self) -> int:
        return self.hardware.world_size

    @property
    def reference(self) -> str:
        """The reference module, verbatim."""
        return self.spec.reference_source

    @property
    def topology(self) -> str:
        """The hardware paragraph of the prompt: executor, world size, interconnect, measured figures."""
        return self.hardware.describe(self.calibration)

    @property
    def prompt(self) -> str:
        """Everything a model needs for a first turn (the env's observation carries the same text)."""
        return self.prompt_after("", 0)

    def prompt_after(self, feedback: str, turn: int) -> str:
        """The prompt of a later turn: the same, with the judge's feedback on the previous attempt."""
        return self.hardware.prompt(self.spec, self.preset, self.dtype, self.calibration, feedback, turn)

    def judge(self, code: object) -> EvaluationRecord:
        """Judge `code` (a raw completion or bare code): an EvaluationRecord, the reward not yet applied."""
        if self.service is None:
            raise TaskError(f"this session previews {self.name} on a machine that is not here "
                            f"({self.hardware.executor}, {self.hardware.topology.name}): it shows prompts and judges "
                            f"nothing; open the task on a JudgeService to judge")
        return self.service.evaluate(self, code)
