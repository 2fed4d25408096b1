"""The judging pipeline: action text in, EvaluationRecord out (docs/architecture.md, "One step").

`Judge` is the service's core (pkb_env/service.py is its one front door). A step builds its context once
(judge/context.py), then runs these stages in this order, each returning its own result, which the
pipeline puts in its place in the record; the first that says stop ends the step:

    parse            judge/parse.py         the code, from a fenced block or bare; size and encoding limits
    screen           judge/screen/          AST: `solution` with the reference's parameters; flags
    reference        judge/reference.py     the expected outputs of the trials (and, once per task and size,
                                            the reference's time), before any process of the candidate exists
    build            judge/candidate.py     the module executed on every rank of fresh candidate ranks
    run              judge/candidate.py     the trials, on the reference's secret seeds
    verify           judge/verify.py        every rank's trial outputs, element by element
    time             judge/candidate.py     bursts with fingerprints, each followed by the reference's replay
                                            of its calls with the candidate stopped (the speedup's pairs),
                                            every report held to the judge's clock (only for correct code;
                                            the candidate's ranks are ended after it)
    timed check      judge/verify.py        every timed call against the reference's replay of its inputs
    roofline         judge/roofline.py      the cost model bounded at the machine's peaks, and the fraction
    verdict          judge/verdict.py       decided once from the results; then the feedback

Parse and screen run in this process (pure Python); everything that executes candidate code runs on the
step's candidate ranks, which are gone when the step returns, whatever happened. Expected outputs come
from the trusted reference ranks, run on the same secret seeds, and stay in this process. The
reference's work is billed to the reference (`record.reference`), not to the candidate's stages.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator

from pkb_env.config import JudgeConfig
from pkb_env.contract import Peaks
from pkb_env.contract.signature import reference_parameters
from pkb_env.executors.interface import CandidateSession, Executor, TrialOutputs
from pkb_env.judge import candidate, pkb
from pkb_env.judge.compiler import KernelService
from pkb_env.judge.context import StepContext
from pkb_env.judge.feedback import write_feedback
from pkb_env.judge.parse import parse_action
from pkb_env.config import TimingProtocol
from pkb_env.judge.reference import Reference, ReferenceTiming, physical_floor
from pkb_env.judge.roofline import roofline
from pkb_env.judge.screen import screen_source
from pkb_env.judge.stopwatch import Stopwatch
from pkb_env.judge.verdict import decide
from pkb_env.judge.verify import pkb_rule_holds, verify_timed, verify_trials
from pkb_env.record import EvaluationRecord, ReferenceWork, Severity, Stage, StageFailure
from pkb_env.redaction import Redactor
from pkb_env.task import TaskSpec, load_task
from pkb_env.topology import Calibration, Topology


class Judge:
    """Judges one step at a time on an executor; holds the reference's cached times and the compile service."""

    def __init__(self, executor: Executor, config: JudgeConfig, protocol: TimingProtocol, topology: Topology):
        self.executor = executor
        self.config = config
        self.protocol = protocol
        self.topology = topology
        self.calibration: Calibration | None = None   # set by the service (at open, or `calibrate`)
        self.redactor = Redactor.of_judge()  # the judge user's secrets: never in a record or the feedback
        self.kernels = KernelService(executor, self.redactor, config)
        self.reference = Reference(executor, protocol, executor.reference_placement.clock)

    @property
    def peaks(self) -> Peaks | None:
        """The peaks the roofline uses: calibrated where measured, datasheet elsewhere."""
        return self.topology.peaks(self.calibration)

    def context(self, task: TaskSpec, preset: str, dtype: str) -> StepContext:
        """A step's context. Inputs are drawn on the ranks' devices (fast) where the reference's ranks are on
        GPUs too, else on the CPU (emulated ranks: a CPU reference checks ranks on GPUs, and must draw alike)."""
        gpu = self.executor.placement.gpu and self.executor.reference_placement.gpu
        return StepContext.make(task, preset, dtype, self.executor.world_size, "device" if gpu else "cpu",
                                self.config.trials, self.config.step_budget_s)

    def evaluate(self, task: TaskSpec, action: object, preset: str, dtype: str) -> EvaluationRecord:
        """Judge `action` on `task` (the size and dtype already checked by the service); JudgeError when the
        judge itself fails (never a candidate's fault, never a record). With `config.pkb` the action is a
        PKB-format file, judged on PKB's statement or through the task's mapping (judge/pkb.py)."""
        if self.config.pkb:
            return pkb.evaluate(self, task, action, preset, dtype)
        return self.statement(task, action, preset, dtype)

    def statement(self, task: TaskSpec, action: object, preset: str, dtype: str, pkb: bool = False) -> EvaluationRecord:
        """Judge `action` on one task's statement; `pkb`: a PKB-format file, screened against PKB's signature and
        called through the task's PKB adapter (contract/pkb.py)."""
        started, record = time.perf_counter(), self._record(task, preset, dtype)
        if self._static(task, action, record, pkb):
            self._stages(task, record, pkb)
        return self._finish(record, started)

    def screen(self, task: TaskSpec, action: object, preset: str, dtype: str) -> EvaluationRecord | None:
        """Parse and screen alone, in this process (no rank is needed): the finished record where they end the
        step (unparsable, flagged), else None (the code must be run to be judged)."""
        if self.config.pkb:
            return pkb.screen(self, task, action, preset, dtype)
        return self.screened(task, action, preset, dtype)

    def screened(self, task: TaskSpec, action: object, preset: str, dtype: str,
                 pkb: bool = False) -> EvaluationRecord | None:
        started, record = time.perf_counter(), self._record(task, preset, dtype)
        return None if self._static(task, action, record, pkb) else self._finish(record, started)

    def _record(self, task: TaskSpec, preset: str, dtype: str) -> EvaluationRecord:
        info = self.executor.info
        return EvaluationRecord(task=task.name, world_size=self.executor.world_size, preset=preset, dtype=dtype,
                                executor=info.name, hardware=info.hardware,
                                performance_available=info.performance_available and self.config.timing)

    def _finish(self, record: EvaluationRecord, started: float) -> EvaluationRecord:
        """The verdict from the results, the judge's secrets redacted, the feedback written."""
        decision = decide(record)
        record.stage, record.verdict, record.error, record.flags = (decision.stage, decision.verdict, decision.error,
                                                                    decision.flags)
        self.redactor.redact(record)  # every text a rank or build produced passes here
        record.feedback = write_feedback(record)
        record.wall_s = time.perf_counter() - started
        return record

    def reference_timing(self, ctx: StepContext, expected: list[TrialOutputs] | None = None) -> ReferenceTiming:
        """The reference's time for `ctx`'s task and size: cached, else measured now (on the expected outputs
        of a step, or of trials run for it)."""
        hardware = self.executor.info.hardware
        cached = self.reference.cached(ctx, hardware)
        if cached is not None:
            return cached
        expected = expected if expected is not None else self.reference.outputs(ctx)
        sizes = (max(t.input_bytes for t in expected), max(t.output_bytes for t in expected))
        return self.reference.time_for(ctx, hardware, sizes, physical_floor(ctx.cost, self.topology.datasheet_peaks()))

    # -- the stages, in order ----------------------------------------------------------------------
    def _static(self, task: TaskSpec, action: object, record: EvaluationRecord, pkb: bool = False) -> bool:
        """Parse and screen (a PKB-format file against PKB's signature); True when the code is to be run."""
        with _stage(record, Stage.PARSE):
            record.parse = parse_action(action, self.config.max_action_chars)
        if record.parse.error:
            return False
        parameters = _parameters(task.name)
        if pkb and task.pkb is not None:   # PKB's signature; where none is declared, the file's own (not checked)
            parameters = task.pkb.parameters(parameters) or _own_parameters(record.parse.code)
        with _stage(record, Stage.SCREEN):
            record.screen = screen_source(record.parse.code, parameters, task.collectives_allowed)
        return not (record.screen.error or any(f.severity is Severity.EXPLOIT for f in record.screen.flags))

    def _stages(self, task: TaskSpec, record: EvaluationRecord, pkb: bool = False) -> None:
        """The stages that run code: the reference's part, then the candidate's ranks."""
        ctx = self.context(task, record.preset, record.dtype)
        # The reference's outputs (and time, measured once per task and cached) first, while no process of
        # this candidate exists to interfere with the reference ranks.
        work = record.reference = ReferenceWork()
        start = time.perf_counter()
        expected = self.reference.outputs(ctx)
        work.trials_s = time.perf_counter() - start
        reference = None
        if record.performance_available:
            work.timing_cached = self.reference.cached(ctx, record.hardware) is not None
            start = time.perf_counter()
            reference = self.reference_timing(ctx, expected)
            work.timing_s = time.perf_counter() - start
        with self.executor.candidate(self.kernels.handle, ctx.deadline) as ranks:
            record.containment = ranks.containment
            timed = self._candidate(ctx, record, ranks, expected, reference, pkb)
            if timed is not None:   # checked while the candidate's ranks come down and the spares move on
                self._timed_check(ctx, record, timed)

    def _candidate(self, ctx: StepContext, record: EvaluationRecord, ranks: CandidateSession,
                   expected: list[TrialOutputs], reference: ReferenceTiming | None,
                   pkb: bool = False) -> candidate.Timed | None:
        """Build, trials, verification and timing on the candidate's ranks; what was timed, if it was."""
        with _stage(record, Stage.BUILD):
            built = candidate.build(ctx, ranks, record.parse.code, pkb)
        if _stopped(record, built):
            return
        record.build = built
        with _stage(record, Stage.RUN):
            ran = candidate.run_trials(ctx, ranks)
        if _stopped(record, ran):
            return None
        record.run, got = ran
        with _stage(record, Stage.VERIFY):
            record.verify = verify_trials(ctx, expected, got)
            if pkb:   # what PKB's own check would say of these trials (beside the verdict: judge/pkb.py)
                returned = frozenset(r.target for r in (ctx.task.pkb.returns or ()) if r.target) \
                    if ctx.task.pkb else frozenset()
                record.verify.pkb_rule = pkb_rule_holds(expected, got, returned & set(ctx.task.inplace_positions))
        if not record.verify.correct or reference is None:
            return None
        reuses = any(shares for trial in got for shares in trial.shares)
        with _stage(record, Stage.TIME) as clock:
            pairs = self.reference.pairing(ctx, ranks, clock)   # its half of the pairs runs on its own watch
            timed = candidate.time_candidate(ctx, ranks, self.protocol, reference, pairs, reuses,
                                             self.executor.placement.clock,
                                             physical_floor(ctx.cost, self.topology.datasheet_peaks()))
        record.reference.replay_s = pairs.seconds
        if _stopped(record, timed):
            return None
        record.timing = timed.result
        ranks.end_timing()   # the ranks told to end (the session's close confirms it), the spares move on
        return timed

    def _timed_check(self, ctx: StepContext, record: EvaluationRecord, timed: candidate.Timed) -> None:
        """The reference's replay of every timed call (made in the pairs): their check, the paired speedup,
        then the roofline."""
        with _stage(record, Stage.VERIFY), self.executor.tracer.span("compare"):
            checked = verify_timed(ctx, timed.log, timed.pairs.log.fingerprints)
        if _stopped(record, checked):
            return
        record.timed_check = checked
        record.timing = candidate.paired(record.timing, timed.log, timed.pairs.log, self.protocol.contended_s)
        if checked.correct:
            with _stage(record, Stage.ROOFLINE):
                record.roofline = roofline(ctx.timed_cost(timed.log), timed.result.time_s, self.peaks,
                                           self.topology.datasheet_peaks())


def _stopped(record: EvaluationRecord, result: object) -> bool:
    """A stage's result that is the failure ending the step goes in its place; True then."""
    if isinstance(result, StageFailure):
        record.failure = result
        return True
    return False


def _own_parameters(code: str) -> list[str]:
    try:
        return reference_parameters(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []   # the screen reports what is wrong with the module


@lru_cache(maxsize=None)
def _parameters(task_name: str) -> list[str]:
    return reference_parameters(load_task(task_name).reference_source)


@contextmanager
def _stage(record: EvaluationRecord, stage: Stage) -> Iterator[Stopwatch]:
    """The block's seconds billed to `stage`, less what its watch hands to the reference (judge/stopwatch.py)."""
    watch = Stopwatch()
    try:
        with watch.running():
            yield watch
    finally:
        record.stage_seconds[stage.value] = record.stage_seconds.get(stage.value, 0.0) + watch.seconds
