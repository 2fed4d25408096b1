"""The judging pipeline: action text in, EvaluationRecord out (docs/architecture.md, "One step").

    parse -> screen -> build -> run trials -> verify -> time -> verify timed outputs -> roofline

Parse and screen run here (pure Python); everything that executes candidate code runs in a candidate
generation of the executor, which is killed at the end of the step whatever happened. Expected outputs
come from the trusted reference generation, run on the same secret seeds, and stay in this process.
Candidates are timed only once their trial outputs are correct: wrong code earns nothing for speed.
Every timed call is then checked against the reference's outputs for the same inputs (fingerprints.py),
and every timing report against the judge's own clock (timing.py): a report the clock rules out, or a
frame no honest rank sends, is an exploit (flagged, the lowest reward).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from pkb_env.contract import FLAT, Check, CostModel, Peaks
from pkb_env.contract.signature import reference_parameters
from pkb_env.executors import operations as ops
from pkb_env.executors import peaks as probes
from pkb_env.executors.channel import ChannelError
from pkb_env.executors.generation import Generation, GenerationFailed
from pkb_env.executors.process import ProcessExecutor
from pkb_env.judge.compare import compare_outputs
from pkb_env.judge.compiler import KernelService
from pkb_env.judge.feedback import write_feedback
from pkb_env.judge.fingerprints import compare_burst
from pkb_env.judge.parse import parse_action
from pkb_env.judge.roofline import roofline
from pkb_env.judge.screen import screen_source
from pkb_env.judge.seeds import SeedPlan
from pkb_env.judge.timing import (BurstLog, CallLimits, TimingProtocol, check_claims, clock_allowance, escaped_work,
                                  overheads, run_bursts, summarize, suspect_reason)
from pkb_env.record import (BuildResult, EvaluationRecord, Flag, Mismatch, RunResult, Severity, Stage,
                            TimingResult, Verdict, VerifyResult)
from pkb_env.redaction import Redactor
from pkb_env.task import TaskSpec, load_task
from pkb_env.topology import (Calibration, calibration_from_measurement, load_calibration, load_topology,
                              save_calibration)

CANDIDATE_FAILURES = (GenerationFailed, ChannelError)


class JudgeError(RuntimeError):
    """The judge itself failed (the reference misbehaved): not the candidate's fault, never rewarded."""


@dataclass(frozen=True)
class JudgeSettings:
    trials: int = 3
    max_action_chars: int = 200_000
    protocol: TimingProtocol | None = None  # None: the placement clock's default (TimingProtocol.for_clock)
    start_timeout_s: float = 120.0
    build_timeout_s: float = 60.0
    trial_timeout_s: float = 30.0
    timing_timeout_s: float = 60.0          # per request of the timing protocol (one burst, one fingerprint)
    calibration_sizes: tuple[int, ...] | None = None  # None: the placement's


@dataclass
class ReferenceTiming:
    """The reference's time (cached per task, preset, dtype, world size and hardware) and its honest overheads."""

    result: TimingResult
    overheads: np.ndarray
    sizes: tuple[int, int]      # (input bytes, output bytes) of one call, the largest rank's


class Judge:
    def __init__(self, executor: ProcessExecutor, settings: JudgeSettings | None = None):
        self.executor = executor
        self.settings = settings or JudgeSettings()
        self.protocol = self.settings.protocol or TimingProtocol.for_clock(executor.placement.clock)
        self.topology = load_topology(executor.info.topology)
        self.redactor = Redactor.of_judge()  # the judge user's secrets: never in a record or the feedback
        self.kernels = KernelService(executor, self.redactor)
        self._reference_times: dict[tuple, ReferenceTiming] = {}
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
        """Latency, bus bandwidth and the machine's peaks, by the timing protocol itself.

        Bursts in the trusted reference generation, nccl-tests' way (one buffer): all_reduce of 4 bytes and
        of the placement's calibration sizes, then the peak probes (executors/peaks.py: send/recv latency
        and bandwidth, matmul, device copy); on GPUs also the copy-engine rate between every pair of GPUs.
        """
        self.executor.settle(self.settings.start_timeout_s)   # no rank starting beside the probes
        gen = self._reference_ready()
        sizes = self.settings.calibration_sizes or self.executor.placement.calibration_sizes
        s = self.settings
        # Short and few bursts per probe (one buffer, no fingerprints): large all_reduces on CPU ranks take
        # tens of ms, and a calibration runs a dozen probes.
        p = replace(self.protocol, min_calls=2, min_bursts=3, warmup_bursts=0, burst_s=self.protocol.burst_s / 2)
        plan = SeedPlan(FLAT.resolve(self.executor.world_size))

        def per_call(workload: dict) -> float:
            log = run_bursts(gen, workload, plan, p, CallLimits(p.max_calls), s.timing_timeout_s,
                             budget_s=p.calibration_budget_s)
            return float(np.median(log.figures()))

        try:
            result = {"latency_s": per_call({"collective": "all_reduce", "bytes": 4}), "busbw": []}
            factor = 2 * (self.executor.world_size - 1) / self.executor.world_size
            for size in sizes:
                result["busbw"].append([size, factor * size / per_call({"collective": "all_reduce", "bytes": size})])
            gpu = self.executor.placement.gpu
            result["peaks"] = probes.peaks_from([(w, per_call(w)) for w in probes.probes(gpu, sizes[-1])])
            if gpu:
                result["peers"] = ops.copy_rates(gen, sizes[-1], s.timing_timeout_s)
        except CANDIDATE_FAILURES as exc:
            self.executor.discard_reference()
            raise JudgeError(f"the calibration failed: {_failure_text(exc)}") from exc
        cal = calibration_from_measurement(self.executor.info.hardware, self.executor.world_size, result,
                                           self.protocol.statistic)
        save_calibration(cal)
        self._calibration = cal
        return cal

    def peaks(self, calibration: Calibration | None = None) -> Peaks | None:
        """The peaks the roofline uses: calibrated where measured (`calibration`, else a cached one),
        datasheet elsewhere; never starts a calibration (the prompt asks before any step)."""
        if calibration is None and self.executor.world_size >= 2 and self.executor.info.performance_available:
            info = self.executor.info
            calibration = load_calibration(info.hardware, self.executor.world_size, self.protocol.statistic)
        return self.topology.peaks(calibration)

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
            expected = self._reference_trials(task, _workload(record, self._rng()),
                                              seeds.per_rank("trial", range(self.settings.trials)), "trials")
        if record.performance_available:
            with _stage(record, Stage.TIME):
                self._reference_time(task, record, expected)
        with _stage(record, Stage.BUILD):
            try:
                gen = self.executor.candidate_generation()
            except (GenerationFailed, OSError) as exc:  # before any of the candidate's code ran: not its failure
                raise JudgeError(f"the candidate's ranks failed to start: {exc}") from exc
        record.containment = self.executor.protection(gen)
        gen.request_handler = self.kernels.handle
        try:
            self._run_candidate(task, record, gen, seeds, expected)
        finally:
            self.executor.release(gen)

    def _run_candidate(self, task: TaskSpec, record: EvaluationRecord, gen: Generation, seeds: SeedPlan,
                       expected: list[ops.TrialOutputs]) -> None:
        s = self.settings
        record.stage = Stage.BUILD
        with _stage(record, Stage.BUILD):
            try:
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
                got = ops.trials(gen, _workload(record, self._rng()), trial_seeds, "trials", s.trial_timeout_s)
            except CANDIDATE_FAILURES as exc:
                record.run = _run_failure(exc, s.trials)
                record.fail(Stage.RUN, *_verdict_for(exc, record))
                return
            record.run = RunResult(trials=s.trials, seconds=time.perf_counter() - start)
        with _stage(record, Stage.VERIFY):
            labels = [f"trial {k}" for k in range(s.trials)]
            record.verify = verify(expected, got, labels, checks_for(task, record))
        if not record.verify.correct:
            record.fail(Stage.VERIFY, Verdict.WRONG, f"{len(record.verify.mismatches)} mismatch(es)")
            return

        if not record.performance_available:
            record.stage, record.verdict = Stage.DONE, Verdict.CORRECT
            return
        reuses = any(shares for trial in got for shares in trial.shares)
        record.stage = Stage.TIME
        with _stage(record, Stage.TIME):
            log = self._time_candidate(task, record, gen, seeds, reuses)
        if log is None:
            return
        # Told to end now (release confirms it is gone): the reference replays the timed calls while it comes down.
        self.executor.retire(gen)
        with _stage(record, Stage.VERIFY):
            try:
                check = self._verify_timed(task, record, log)
            except ChannelError as exc:
                record.fail(Stage.TIME, *_verdict_for(exc, record))
                return
            record.verify.checked += check.checked
            record.verify.mismatches.extend(check.mismatches)
            record.verify.correct = check.correct
        if not check.correct:
            record.fail(Stage.TIME, Verdict.WRONG, "outputs of timed calls differ from the reference "
                        "(caching, replaying, deferring or skipping work in some calls?)")
            return
        with _stage(record, Stage.ROOFLINE):
            self._roofline(task, record)
        record.stage, record.verdict = Stage.DONE, Verdict.CORRECT

    def _time_candidate(self, task: TaskSpec, record: EvaluationRecord, gen: Generation, seeds: SeedPlan,
                        reuses: bool) -> BurstLog | None:
        """Bursts with fingerprints; the claims checked against the judge's clock. None when the step ended.

        `reuses`: the candidate returned the same memory in two trials (a buffer it refills), so each of its
        timed outputs is copied as its call returns, inside the timed window, as a caller would have to.
        """
        s, p = self.settings, self.protocol
        reference = self._reference_time(task, record, None)
        self.executor.settle(s.start_timeout_s)  # no spare starting beside the candidate's bursts
        try:
            log = run_bursts(gen, _workload(record, self._rng()), seeds, p, self._limits(gen, reference),
                             s.timing_timeout_s, p.budget_s, rules=fingerprint_rules(checks_for(task, record)),
                             capture_every=reuses)
            gen.quiet("timing")  # a frame nobody asked for (a forged report sent late) is caught here
        except CANDIDATE_FAILURES as exc:
            verdict, text = _verdict_for(exc, record)
            record.fail(Stage.TIME, verdict, text + _tails(exc))
            return None
        timing = summarize(log, self.executor.placement.clock)
        claims = check_claims(log, clock_allowance(p, reference.overheads), p.clock_relative)
        timing.clock_allowance_s, timing.clock_margin_s, timing.claim_ratio = (claims.allowance_s, claims.margin_s,
                                                                               claims.claim_ratio)
        timing.reference_s = reference.result.time_s
        timing.speedup = reference.result.time_s / timing.time_s if timing.time_s > 0 else None
        timing.suspect = (escaped_work(timing, reference.result, p.hidden_work_s)
                          or suspect_reason(timing.time_s, self._physical_floor(task, record)))
        record.timing = timing
        if claims.problem:
            record.flags.append(Flag("forged_timing", Severity.EXPLOIT, claims.problem))
            record.fail(Stage.TIME, Verdict.FLAGGED, f"timing reports the judge's clock rules out: {claims.problem}")
            return None
        return log

    def _verify_timed(self, task: TaskSpec, record: EvaluationRecord, log: BurstLog) -> VerifyResult:
        """Every timed call of every rank against the reference's replay of the same inputs."""
        checks = checks_for(task, record)
        workload = _workload(record, self._rng())
        rules, timeout = fingerprint_rules(checks), self.settings.timing_timeout_s
        expected = self._with_reference(task, lambda gen: [
            ops.replay(gen, workload, log.seeds[b], burst.calls, b, log.sketch_seeds[b], rules, log.samples[b],
                       timeout) for b, burst in enumerate(log.bursts)])
        mismatches: list[Mismatch] = []
        for b, (exp_ranks, got_ranks) in enumerate(zip(expected, log.sketches)):
            for rank, (exp, got) in enumerate(zip(exp_ranks, got_ranks)):
                mismatches += compare_burst(exp, got, checks, b, rank)  # ChannelError: a forged payload
        checked = sum(burst.calls for burst in log.bursts) * self.executor.world_size
        return VerifyResult(correct=not mismatches, checked=checked, mismatches=mismatches)

    def _roofline(self, task: TaskSpec, record: EvaluationRecord) -> None:
        record.roofline = roofline(_cost_model(task, record), record.timing.time_s, self.peaks(self.calibration()),
                                   self.topology.datasheet_peaks())

    def _physical_floor(self, task: TaskSpec, record: EvaluationRecord) -> float | None:
        """The least time the task can take here: its cost model bounded at the datasheet's peaks (None where
        the topology has none). The one input of the suspect rule (timing.suspect_reason)."""
        floor = roofline(_cost_model(task, record), 1.0, None, self.topology.datasheet_peaks())
        return floor.bound.bound_s if floor is not None else None

    def _rng(self) -> str:
        """Where input sets are drawn: on the ranks' devices (fast) where the reference's ranks are on GPUs
        too, else on the CPU (emulated ranks: a CPU reference checks ranks on GPUs, and must draw alike)."""
        executor = self.executor
        return "device" if executor.placement.gpu and executor.reference_placement.gpu else "cpu"

    def _limits(self, gen: Generation, reference: ReferenceTiming) -> CallLimits:
        """Calls per burst (memory) and in all (the reference's replay), for a session on `gen`."""
        memory = min((f.get("memory_bytes") or 0) for f in gen.facts) or \
            self.executor.placement.limits.address_space_bytes or (2 << 30)
        replayed = reference.result.time_s if reference.result is not None else None
        return CallLimits.from_sizes(self.protocol, *reference.sizes, memory, replayed)

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

    def _reference_trials(self, task: TaskSpec, workload: dict, seeds, label: str) -> list[ops.TrialOutputs]:
        s = self.settings
        return self._with_reference(task, lambda gen: ops.trials(gen, workload, seeds, label, s.trial_timeout_s))

    def _reference_time(self, task: TaskSpec, record: EvaluationRecord,
                        expected: list[ops.TrialOutputs] | None) -> ReferenceTiming:
        """The reference timed by the same protocol in the same placement, once per task and size."""
        key = (task.name, record.preset, record.dtype, self.executor.world_size, self.executor.info.hardware)
        if key not in self._reference_times:
            if expected is None:
                raise JudgeError("the reference's time was not measured before the candidate's")
            s, p = self.settings, self.protocol
            sizes = (max(t.input_bytes for t in expected), max(t.output_bytes for t in expected))

            def measure(gen: Generation) -> BurstLog:
                limits = self._limits(gen, ReferenceTiming(None, np.zeros(0), sizes))
                return run_bursts(gen, _workload(record, self._rng()), SeedPlan(task.layout(self.executor.world_size)),
                                  p, limits, s.timing_timeout_s, p.reference_budget_s)

            self.executor.settle(s.start_timeout_s)   # no rank starting beside the reference's bursts
            log = self._with_reference(task, measure)
            result = summarize(log, self.executor.placement.clock)
            problem = suspect_reason(result.time_s, self._physical_floor(task, record))
            if problem:  # the reference is correct by definition: a time it cannot have is the judge's fault
                raise JudgeError(f"the judge's own clock is wrong: the reference measured {problem}")
            self._reference_times[key] = ReferenceTiming(result, overheads(log), sizes)
        return self._reference_times[key]


def checks_for(task: TaskSpec, record: EvaluationRecord) -> dict[str, Check]:
    """How each output of this step is compared (its tolerance by the task's rule of dtype and size, and
    whether its rows form a set): the trials, the sampled outputs and the fingerprints all use it."""
    return task.output_checks(record.dtype, task.preset(record.preset).dims, record.world_size)


def fingerprint_rules(checks: dict[str, Check]) -> dict[str, list]:
    """The checks as the ranks' fingerprints need them: path -> [atol, rtol, rows form a set]."""
    return {path: [c.tolerance.atol, c.tolerance.rtol, c.unordered] for path, c in checks.items()}


def _cost_model(task: TaskSpec, record: EvaluationRecord) -> CostModel:
    """The task's cost model at the size, world size and dtype this step judges."""
    return task.cost_model(task.preset(record.preset).dims, record.world_size, record.dtype)


def _workload(record: EvaluationRecord, rng: str) -> dict:
    return {"task": record.task, "preset": record.preset, "dtype": record.dtype, "rng": rng}


def verify(expected: list[ops.TrialOutputs], got: list[ops.TrialOutputs], labels: list[str],
           checks: dict[str, Check]) -> VerifyResult:
    """Compare every rank's outputs of every call with the reference's; aliasing and input mutation count.

    Each output is compared by its own check (checks_for: the task's tolerance at this dtype and size;
    exact for integers, booleans and data movement; rows as a set for unordered outputs).
    """
    mismatches: list[Mismatch] = []
    checked = 0
    for label, exp, cand in zip(labels, expected, got):
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
    """A rank failure is a runtime error, unless the rank was caught forging messages or tampering.

    What a rank says about its own failure (its error kind, its message) can only make the verdict
    worse: a forged or unreadable frame, or the tripwire's notice, is an exploit flag.
    """
    text = _failure_text(exc)
    failures = getattr(exc, "failures", None)
    if not failures:  # a payload the judge could not read: only a forger sends one
        record.flags.append(Flag("forged_message", Severity.EXPLOIT, text))
        return Verdict.FLAGGED, text
    for kind, code in (("forged", "forged_message"), ("tampered", "runtime_tampering")):
        found = [f for f in failures if f.kind == kind]
        if found:
            record.flags.append(Flag(code, Severity.EXPLOIT, found[0].message))
            return Verdict.FLAGGED, text
    return Verdict.RUNTIME_ERROR, text


def _tails(exc: Exception) -> str:
    tails = "\n".join(f"[rank {f.rank}] {f.log_tail}" for f in getattr(exc, "failures", []) if f.log_tail.strip())
    return f"\nOutput of the failing rank(s), last lines:\n{tails[-1200:]}" if tails else ""


def _run_failure(exc: Exception, trials: int) -> RunResult:
    failures = list(getattr(exc, "failures", []))
    return RunResult(trials=trials, failures=failures, error=_failure_text(exc),
                     log_tail="\n".join(f"[rank {f.rank}] {f.log_tail}" for f in failures if f.log_tail.strip()))
