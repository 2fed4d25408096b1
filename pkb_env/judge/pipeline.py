"""The judging pipeline: action text in, EvaluationRecord out (docs/architecture.md, "One step").

    parse -> screen -> build -> run trials -> verify -> time -> verify timed outputs -> roofline

Parse and screen run here (pure Python); everything that executes candidate code runs in a candidate
generation of the executor, which is killed at the end of the step whatever happened. Expected outputs
come from the trusted reference generation, run on the same secret seeds, and stay in this process.
Candidates are timed only once their trial outputs are correct: wrong code earns nothing for speed.
"""
from __future__ import annotations

import random
import time
from contextlib import contextmanager
from functools import lru_cache
from dataclasses import dataclass

from pkb_env.executors import operations as ops
from pkb_env.executors.channel import ChannelError
from pkb_env.executors.generation import Generation, GenerationFailed
from pkb_env.executors.process import ProcessExecutor
from pkb_env.judge.compare import compare_outputs
from pkb_env.judge.compiler import KernelService
from pkb_env.judge.feedback import write_feedback
from pkb_env.judge.parse import parse_action
from pkb_env.judge.roofline import roofline
from pkb_env.judge.screen import reference_parameters, screen_source
from pkb_env.judge.seeds import SeedPlan
from pkb_env.judge.timing import PROTOCOLS, TimingProtocol, summarize
from pkb_env.record import (BuildResult, EvaluationRecord, Flag, Mismatch, RunResult, Severity, Stage,
                            TimingResult, Verdict, VerifyResult)
from pkb_env.contract import Peaks
from pkb_env.redaction import Redactor
from pkb_env.task import TaskSpec, load_task
from pkb_env.topology import (Calibration, calibration_from_measurement, load_calibration, load_topology,
                              save_calibration)

CANDIDATE_FAILURES = (GenerationFailed, ChannelError)
# all_reduce sizes (bytes) whose best bus bandwidth is the calibrated B; GPUs need large messages to saturate.
CALIBRATION_SIZES = {"cpu": (1 << 20, 8 << 20), "cuda": (1 << 20, 64 << 20, 256 << 20), "cuda-emulated": (1 << 20,)}


class JudgeError(RuntimeError):
    """The judge itself failed (the reference misbehaved): not the candidate's fault, never rewarded."""


@dataclass(frozen=True)
class JudgeSettings:
    trials: int = 3
    max_action_chars: int = 200_000
    protocol: TimingProtocol | None = None  # None: the executor's default (timing.PROTOCOLS)
    start_timeout_s: float = 120.0
    build_timeout_s: float = 60.0
    trial_timeout_s: float = 30.0
    timing_timeout_s: float = 60.0
    calibration_sizes: tuple[int, ...] | None = None  # None: CALIBRATION_SIZES of the executor


class Judge:
    def __init__(self, executor: ProcessExecutor, settings: JudgeSettings | None = None):
        self.executor = executor
        self.settings = settings or JudgeSettings()
        self.protocol = self.settings.protocol or PROTOCOLS[executor.info.name]
        self.topology = load_topology(executor.info.topology)
        self.redactor = Redactor.of_judge()  # the judge user's secrets: never in a record or the feedback
        self.kernels = KernelService(executor, self.redactor)
        self._reference_times: dict[tuple, TimingResult] = {}
        self._calibration: Calibration | None = None

    # -- public ------------------------------------------------------------------------------------
    def evaluate(self, task: TaskSpec, action: object, preset: str, dtype: str | None = None) -> EvaluationRecord:
        dtype = task.resolve_dtype(preset, dtype)
        task.check_world_size(self.executor.world_size, preset)
        info = self.executor.info
        record = EvaluationRecord(task=task.name, world_size=self.executor.world_size, preset=preset, dtype=dtype,
                                  executor=info.name, hardware=info.hardware,
                                  performance_available=info.performance_available)
        try:
            self._judge(task, action, record)
        finally:
            self.redactor.redact(record)  # every text a rank or build produced passes here
            record.feedback = write_feedback(record)
        return record

    def calibration(self) -> Calibration | None:
        """Measured alpha and bandwidth for this hardware and world size (cached on disk)."""
        if self.executor.world_size < 2 or not self.executor.info.performance_available:
            return None
        if self._calibration is None:
            info = self.executor.info
            self._calibration = (load_calibration(info.hardware, self.executor.world_size, self.protocol.statistic)
                                 or self.calibrate())
        return self._calibration

    def calibrate(self) -> Calibration:
        gen = self._reference_ready()
        sizes = self.settings.calibration_sizes or CALIBRATION_SIZES[self.executor.info.name]
        result = ops.calibrate(gen, list(sizes), self.protocol.statistic, self.settings.timing_timeout_s)
        cal = calibration_from_measurement(self.executor.info.hardware, self.executor.world_size, result,
                                           self.protocol.statistic)
        save_calibration(cal)
        self._calibration = cal
        return cal

    # -- stages ------------------------------------------------------------------------------------
    def _judge(self, task: TaskSpec, action: object, record: EvaluationRecord) -> None:
        s = self.settings
        with _stage(record, Stage.PARSE):
            record.parse = parse_action(action, s.max_action_chars)
        if record.parse.error:
            record.fail(Stage.PARSE, Verdict.UNPARSABLE, record.parse.error)
            return
        with _stage(record, Stage.SCREEN):
            record.screen = screen_source(record.parse.code, _parameters(task.name), task.collectives_allowed)
            record.flags.extend(record.screen.flags)
        if record.exploit_flags:  # before the signature check: flagged ranks below unparsable
            record.fail(Stage.SCREEN, Verdict.FLAGGED, "; ".join(f.message for f in record.exploit_flags))
            return
        if record.screen.error:
            record.fail(Stage.SCREEN, Verdict.UNPARSABLE, record.screen.error)
            return

        seeds = SeedPlan(task.layout(self.executor.world_size))
        # Expected outputs and the reference's time first, while no process of this candidate exists to
        # interfere with the reference ranks (the time is measured once per task and cached).
        with _stage(record, Stage.VERIFY):
            expected = self._reference_trials(task, record.preset, record.dtype,
                                              seeds.per_rank("trial", range(self.settings.trials)), "trials")
        if record.performance_available:
            with _stage(record, Stage.TIME):
                self._reference_time(task, record.preset, record.dtype)
        gen = self.executor.candidate_generation()
        record.containment = self.executor.protection(gen)
        gen.request_handler = self.kernels.handle
        try:
            self._run_candidate(task, record, gen, seeds, expected)
        finally:
            self.executor.release(gen)

    def _run_candidate(self, task: TaskSpec, record: EvaluationRecord, gen: Generation, seeds: SeedPlan,
                       expected: list[ops.TrialOutputs]) -> None:
        s = self.settings
        preset, dtype = record.preset, record.dtype
        record.stage = Stage.BUILD
        with _stage(record, Stage.BUILD):
            try:
                gen.wait_ready(s.start_timeout_s)
                record.build = BuildResult(seconds=ops.load(gen, task.name, record.parse.code, s.build_timeout_s))
            except CANDIDATE_FAILURES as exc:
                record.build = BuildResult(error=_failure_text(exc))
                verdict, text = _verdict_for(exc, record)
                record.fail(Stage.BUILD, Verdict.BUILD_ERROR if verdict is Verdict.RUNTIME_ERROR else verdict, text)
                return

        trial_seeds = seeds.per_rank("trial", range(s.trials))
        record.stage = Stage.RUN
        with _stage(record, Stage.RUN):
            start = time.perf_counter()
            try:
                got = ops.trials(gen, preset, dtype, trial_seeds, "trials", s.trial_timeout_s)
            except CANDIDATE_FAILURES as exc:
                record.run = _run_failure(exc, s.trials)
                record.fail(Stage.RUN, *_verdict_for(exc, record))
                return
            record.run = RunResult(trials=s.trials, seconds=time.perf_counter() - start)
        with _stage(record, Stage.VERIFY):
            labels = [f"trial {k}" for k in range(s.trials)]
            record.verify = verify(task, preset, dtype, expected, got, labels)
        if not record.verify.correct:
            record.fail(Stage.VERIFY, Verdict.WRONG, f"{len(record.verify.mismatches)} mismatch(es)")
            return

        if not record.performance_available:
            record.stage, record.verdict = Stage.DONE, Verdict.CORRECT
            return
        record.stage = Stage.TIME
        with _stage(record, Stage.TIME):
            if not self._time_candidate(task, record, gen, seeds):
                return
        with _stage(record, Stage.ROOFLINE):
            self._roofline(task, record)
        record.stage, record.verdict = Stage.DONE, Verdict.CORRECT

    def _time_candidate(self, task: TaskSpec, record: EvaluationRecord, gen: Generation, seeds: SeedPlan) -> bool:
        s, p = self.settings, self.protocol
        sets = seeds.per_rank("timed", range(p.max_calls))
        warm = seeds.per_rank("warmup", range(p.warmup_sets))
        try:
            calls = ops.timed_calls(gen, record.preset, record.dtype, sets, warm, p.message(), s.timing_timeout_s)
            timing = summarize(calls, p)
            indices = sorted(random.SystemRandom().sample(range(timing.calls), min(p.timed_samples, timing.calls)))
            snaps = ops.snapshots(gen, indices, s.trial_timeout_s)
        except CANDIDATE_FAILURES as exc:
            record.run.failures.extend(getattr(exc, "failures", []))
            record.fail(Stage.TIME, *_verdict_for(exc, record))
            return False
        self.executor.release(gen)  # nothing of the candidate may run while the reference works
        expected = self._reference_trials(task, record.preset, record.dtype,
                                          seeds.per_rank("timed", [i % calls.sets for i in indices]),
                                          "timed-output check", rng="device")
        labels = [f"timed call {i}" for i in indices]
        check = verify(task, record.preset, record.dtype, expected, [ops.TrialOutputs(o, [], [[]] * len(o), [[]] * len(o))
                                                      for o in snaps], labels)
        record.verify.checked += check.checked
        if not check.correct:
            record.verify.correct = False
            record.verify.mismatches.extend(check.mismatches)
            record.fail(Stage.TIME, Verdict.WRONG, "outputs of timed calls differ from the reference "
                        "(caching, replaying or deferring work across calls?)")
            return False
        reference = self._reference_time(task, record.preset, record.dtype)
        timing.reference_s = reference.time_s
        timing.speedup = reference.time_s / timing.time_s if timing.time_s > 0 else None
        if timing.host_gap_s is not None and reference.host_gap_s is not None and \
                timing.host_gap_s > 2 * reference.host_gap_s + p.hidden_work_s:
            timing.suspect = (f"the device stayed busy {timing.host_gap_s * 1e6:.0f} us past the end of each call "
                              f"on the caller's stream (reference: {reference.host_gap_s * 1e6:.0f} us): work on "
                              f"unjoined streams or threads is not credited")
        record.timing = timing
        return True

    def _roofline(self, task: TaskSpec, record: EvaluationRecord) -> None:
        model = task.cost_model(task.preset(record.preset).dims, record.world_size, record.dtype)
        record.roofline = roofline(model, record.timing.time_s, self.peaks(self.calibration()),
                                   self.topology.datasheet_peaks())
        r, p, t = record.roofline, self.protocol, record.timing
        if r is None or t.suspect is not None:
            return
        if r.spec_fraction is not None and r.spec_fraction > 1:
            t.suspect = (f"{p.statistic} {t.time_s * 1e6:.1f} us is under the physical floor of the task's cost "
                         f"model at datasheet peaks, {r.datasheet.bound_s * 1e6:.1f} us")
        elif t.time_s < p.suspect_below * r.bound_s:
            t.suspect = (f"{p.statistic} {t.time_s * 1e6:.1f} us is under {p.suspect_below:g}x the roofline "
                         f"bound {r.bound_s * 1e6:.1f} us")

    def peaks(self, calibration: Calibration | None = None) -> Peaks | None:
        """The peaks the roofline uses: calibrated where measured (`calibration`, else a cached one),
        datasheet elsewhere; never starts a calibration (the prompt asks before any step)."""
        if calibration is None and self.executor.world_size >= 2 and self.executor.info.performance_available:
            info = self.executor.info
            calibration = load_calibration(info.hardware, self.executor.world_size, self.protocol.statistic)
        return self.topology.peaks(calibration)

    # -- reference ---------------------------------------------------------------------------------
    def _reference_ready(self) -> Generation:
        gen = self.executor.reference_generation()
        try:
            gen.wait_ready(self.settings.start_timeout_s)
        except GenerationFailed as exc:
            self.executor.discard_reference()
            raise JudgeError(f"the reference ranks failed to start: {exc}") from exc
        return gen

    def _with_reference(self, task: TaskSpec, work):
        """Run `work(gen)` on the reference ranks with the task loaded; once more on fresh ranks if they died.

        Reference ranks never run candidate code, but a candidate that ran as the same user may have killed
        them during its step; the reference only works while no candidate process is alive, so a fresh
        generation cannot be reached. A second failure is the judge's own: JudgeError.
        """
        for attempt in (1, 2):
            gen = self.executor.reference_generation()
            try:
                gen.wait_ready(self.settings.start_timeout_s)
                ops.load(gen, task.name, None, self.settings.build_timeout_s)
                return work(gen)
            except CANDIDATE_FAILURES as exc:
                self.executor.discard_reference()
                if attempt == 2:
                    raise JudgeError(f"the reference failed: {_failure_text(exc)}") from exc

    def _reference_trials(self, task: TaskSpec, preset: str, dtype: str, seeds, label: str,
                          rng: str = "cpu") -> list[ops.TrialOutputs]:
        s = self.settings
        return self._with_reference(task, lambda gen: ops.trials(gen, preset, dtype, seeds, label,
                                                                 s.trial_timeout_s, rng))

    def _reference_time(self, task: TaskSpec, preset: str, dtype: str) -> TimingResult:
        key = (task.name, preset, dtype, self.executor.world_size, self.executor.info.hardware)
        if key not in self._reference_times:
            s, p = self.settings, self.protocol
            seeds = SeedPlan(task.layout(self.executor.world_size))
            calls = self._with_reference(task, lambda gen: ops.timed_calls(
                gen, preset, dtype, seeds.per_rank("timed", range(p.max_calls)),
                seeds.per_rank("warmup", range(p.warmup_sets)), p.message(), s.timing_timeout_s))
            self._reference_times[key] = summarize(calls, p)
        return self._reference_times[key]


def verify(task: TaskSpec, preset: str, dtype: str, expected: list[ops.TrialOutputs], got: list[ops.TrialOutputs],
           labels: list[str]) -> VerifyResult:
    """Compare every rank's outputs of every call with the reference's; aliasing and input mutation count.

    Each output is compared by its own check (TaskSpec.output_checks: the task's tolerance at this dtype
    and size; exact for integers, booleans and data movement; rows as a set for unordered outputs).
    """
    mismatches: list[Mismatch] = []
    checked = 0
    for label, exp, cand in zip(labels, expected, got):
        checks = task.output_checks(dtype, task.preset(preset).dims, len(exp.outputs))
        for rank, (e, g) in enumerate(zip(exp.outputs, cand.outputs)):
            checked += 1
            for path in cand.aliases[rank]:
                mismatches.append(Mismatch(label, rank, path, f"{path} is a view of an input argument; "
                                           f"return a new tensor"))
            for path in cand.mutated[rank]:
                mismatches.append(Mismatch(label, rank, path, f"the call modified {path}; inputs must be left "
                                           f"unchanged (copy before working in place)"))
            mismatches.extend(compare_outputs(e, g, checks, label, rank))
    return VerifyResult(correct=not mismatches, checked=checked, mismatches=mismatches)


@lru_cache(maxsize=None)
def _parameters(task_name: str) -> list[str]:
    return reference_parameters(load_task(task_name).reference_source)


@contextmanager
def _stage(record: EvaluationRecord, stage: Stage):
    start = time.perf_counter()
    try:
        yield
    finally:
        record.stage_seconds[stage.value] = record.stage_seconds.get(stage.value, 0.0) + time.perf_counter() - start


def _failure_text(exc: Exception) -> str:
    failures = getattr(exc, "failures", None)
    if failures:
        return "; ".join(f.message for f in failures)
    return f"a rank returned something the judge could not read: {exc}"


def _verdict_for(exc: Exception, record: EvaluationRecord) -> tuple[Verdict, str]:
    """A rank failure is a runtime error, unless a rank caught the candidate replacing judge machinery."""
    text = _failure_text(exc)
    tampering = [f for f in getattr(exc, "failures", []) if f.kind == "tampered"]
    if tampering:
        record.flags.append(Flag("runtime_tampering", Severity.EXPLOIT, tampering[0].message))
        return Verdict.FLAGGED, text
    return Verdict.RUNTIME_ERROR, text


def _run_failure(exc: Exception, trials: int) -> RunResult:
    failures = list(getattr(exc, "failures", []))
    return RunResult(trials=trials, failures=failures, error=_failure_text(exc),
                     log_tail="\n".join(f"[rank {f.rank}] {f.log_tail}" for f in failures if f.log_tail.strip()))

