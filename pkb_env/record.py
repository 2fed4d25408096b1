"""The evaluation record: all that is known about one judged step, assembled from the stages' own results.

Each stage (judge/pipeline.py lists them in order) returns its own result object and the pipeline puts
it in its place; no stage writes another's part. The verdict is decided once, from the results, by
judge/verdict.py. The record is what `info["record"]` carries, what wandb logs, what rewards read, and
what crosses processes and the network: `to_dict()` gives plain JSON, `EvaluationRecord.from_dict`
reads it back (`from_dict(r.to_dict()) == r`).
"""
from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Union


class Stage(str, enum.Enum):
    """Pipeline stages in order; `EvaluationRecord.stage` is the last one reached."""

    PARSE = "parse"
    SCREEN = "screen"
    BUILD = "build"
    RUN = "run"
    VERIFY = "verify"
    TIME = "time"
    ROOFLINE = "roofline"
    DONE = "done"


class Verdict(str, enum.Enum):
    """What happened to the candidate, worst first: the order rewards must respect (docs/architecture.md, "One step").

    JUDGE_ERROR is not the candidate's: the judge could not give a verdict (a pool's worker was lost twice, the
    step outran its deadline, the reference failed). Rewards score it 0 and say so (rewards/base.py,
    `unjudged`); trainers drop it. It sorts first so that a run holding one reports the judge's failure.
    """

    JUDGE_ERROR = "judge_error"    # no verdict: the judge failed, not the candidate (pkb_env/pool/)
    FLAGGED = "flagged"            # a static or runtime exploit flag
    UNPARSABLE = "unparsable"      # no code, syntax error, no `solution` with the right signature
    BUILD_ERROR = "build_error"    # importing the module or compiling its kernels failed
    RUNTIME_ERROR = "runtime_error"  # raised, crashed, timed out or deadlocked while running
    WRONG = "wrong"                # ran, but some rank's output differs from the reference
    CORRECT = "correct"

    @property
    def rank(self) -> int:
        return list(Verdict).index(self)


class Severity(str, enum.Enum):
    INFO = "info"        # worth knowing (uses threads, calls NCCL); never penalised
    EXPLOIT = "exploit"  # an attempt on the judge; the step gets the bounded penalty


@dataclass
class Flag:
    """A finding of the static screen or of a runtime check."""

    code: str
    severity: Severity
    message: str
    line: int | None = None


@dataclass
class ParseResult:
    code: str | None
    action_chars: int
    from_fence: bool
    error: str | None = None
    note: str | None = None        # worth telling the agent, not an error (e.g. replacement characters)


@dataclass
class ScreenResult:
    flags: list[Flag] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)   # the candidate's own positional parameter names
    error: str | None = None


@dataclass
class BuildResult:
    """Import of the candidate module in every rank (and kernel compiles it triggers at import)."""

    seconds: float = 0.0


@dataclass
class RankFailure:
    """Why a rank did not deliver: raised, exited, was killed, ran out of time, or said what no honest rank says."""

    rank: int
    kind: str          # "exception" | "exit" | "signal" | "timeout" | "forged" | "tampered" | "forged_timing"
    message: str
    phase: str         # "build" | "trials" | "timing" | "timed-output check" | ...
    log_tail: str = ""


@dataclass
class StageFailure:
    """What ended a step in a stage that ran candidate code: every failing rank's account, as the judge saw it.

    `kind` of each failure decides the verdict (judge/verdict.py): a forged frame, tampering with the
    judge's tools or a timing report the judge's clock rules out is an exploit; anything else a build or
    runtime error."""

    stage: Stage
    error: str                                   # one line per failing rank, for the agent
    failures: list[RankFailure] = field(default_factory=list)

    @property
    def log_tail(self) -> str:
        return "\n".join(f"[rank {f.rank}] {f.log_tail}" for f in self.failures if f.log_tail.strip())


@dataclass
class RunResult:
    trials: int = 0
    seconds: float = 0.0


@dataclass
class ReferenceWork:
    """The reference's part of a step, billed to it and not to the candidate's stages: its trials (the
    expected outputs), its timing (once per task and size, cached after), its replay of the timed calls."""

    trials_s: float = 0.0
    timing_s: float = 0.0
    timing_cached: bool = False
    replay_s: float = 0.0


@dataclass
class Mismatch:
    """Where one rank's output differs from the reference, and by how much."""

    trial: str          # "trial 0", "timed call 17"
    rank: int
    path: str           # "output", "output[1]", "output['values']"
    message: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    bad_elements: int | None = None
    total_elements: int | None = None
    first_index: list[int] | None = None
    expected: str | None = None
    got: str | None = None
    # what differs, for the headline: "value" (elements or structure), "view" (an output is a view of an input),
    # "mutated" (an input was changed), "permuted" (the right rows in other places), "untouched" (state the task
    # updates in place that still holds its input value)
    kind: str = "value"


@dataclass
class VerifyResult:
    correct: bool
    checked: int = 0                       # output sets compared (calls x ranks)
    mismatches: list[Mismatch] = field(default_factory=list)
    error: str | None = None
    pkb_rule: bool | None = None           # PKB-format files: whether PKB's own check passes (compat/rule.py)
    cause: str | None = None               # timed calls: the data the failing calls held (judge/timed_causes.py)


@dataclass
class TimingResult:
    """Time per call of steady-state bursts (docs/timing.md): one figure per burst (the slowest rank's busy
    time per call, or on CPU ranks its fastest mark interval), then the median over bursts. Made whole by
    the TIME stage (judge/candidate.py, `time_candidate`)."""

    time_s: float                         # the figure of merit: median burst figure (speedup, roofline)
    statistic: str                        # "burst-median" (GPUs) | "interval-min" (CPU ranks)
    clock: str                            # "cuda" (CUDA events behind a device gate) | "host"
    median_s: float
    spread: float                         # (p90 - p10) / median over bursts
    min_s: float
    max_s: float
    calls: int                            # timed calls in all (each on an input set of its own)
    warmup_calls: int
    input_sets: int = 0                   # distinct input sets of the timed calls (one per call)
    bursts: int = 0
    rse: float = 0.0                      # relative standard error of the burst figures
    per_call: dict[str, float] = field(default_factory=dict)  # p10/p50/p90/p99 of mark intervals, per call
    launch_s: float | None = None         # host time to issue one call (what a CUDA graph would save)
    idle_s: float | None = None           # device busy after a burst's end (median; GPUs)
    wall_s: float = 0.0                   # the judge's wall time for the whole session
    clock_allowance_s: float | None = None  # reporting overhead an honest rank may show per burst
    clock_margin_s: float | None = None   # room left under the allowance in the worst rank's best burst (>= 0)
    claim_ratio: float | None = None      # smallest claimed busy time / judge's wall time of a burst
    reference_s: float | None = None      # the reference's time, same protocol and placement: time_s x speedup
    speedup: float | None = None          # pseudo-median of the step's paired ratios (docs/timing.md, "Paired speedup")
    pairs: int = 0                        # (candidate burst, the reference's replay of it) pairs behind it
    speedup_spread: float | None = None   # (p90 - p10) of the pairs' ratios / the speedup
    cached_reference_s: float | None = None  # the reference's time measured once per task (prompt, calibration)
    speedup_low: float | None = None      # a 90% interval of the speedup from its pairs (signed-rank; None: < 5 pairs)
    speedup_high: float | None = None
    pair_ratios: list[float] = field(default_factory=list)  # each pair's reference / candidate figure, in order
    device_wait_s: float | None = None    # GPUs: the reference's longest probe wait before a replay (contended_s)
    suspect: str | None = None            # why the time cannot be trusted (never rewarded then)


@dataclass
class CommTerm:
    """One communication term of a task's cost model, in nccl-tests vocabulary (pkb_env/contract/cost.py)."""

    collective: str                       # a key of contract.cost.COLLECTIVES
    group: str                            # the mesh dimension it runs over ("world" for all ranks)
    ranks: int                            # ranks in that group
    size_bytes: int                       # nccl-tests' S for the collective (algbw = S / t)
    bus_bytes: int                        # S times the bus factor: what the busiest rank moves one way
    steps: int                            # dependent cross-rank rounds, each charged alpha
    why: str = ""                         # why this collective, where the model picks one by size (Comm.why)


@dataclass
class ComputeTerm:
    flops: float
    kind: str                             # "matmul" (tensor cores where the dtype has them) | "vector"
    tensor_cores: bool


@dataclass
class Bound:
    """The cost model's lower bound at one set of peaks: max(comm, compute, memory), and their serial sum."""

    source: str                           # "datasheet" | "calibrated" (measured here, datasheet elsewhere)
    comm_s: float
    compute_s: float
    memory_s: float
    bound_s: float                        # max of the three: perfect overlap, what the best fused kernels aim at
    serial_s: float                       # their sum: no overlap at all
    dominant: str                         # "communication" | "compute" | "memory"
    bandwidth_gbps: float | None          # per rank, one way
    alpha_s: float | None
    hbm_gbps: float | None
    compute_tflops: dict[str, float] = field(default_factory=dict)  # rate used per compute kind
    missing: list[str] = field(default_factory=list)                # terms left out: no peak known


@dataclass
class RooflineResult:
    """The task's cost model at the judged size, its bounds, and the fraction of the bound reached.

    `fraction` is bound / measured, NOT clipped: above 1 the model or the measurement is wrong.
    """

    comm: list[CommTerm]
    compute: list[ComputeTerm]
    hbm_bytes: float
    bound: Bound                          # calibrated where a calibration exists, else the datasheet's
    fraction: float
    datasheet: Bound | None = None
    spec_fraction: float | None = None    # against the datasheet bound, where the topology has peaks
    algbw_gbps: float | None = None       # sum of S over the measured time (tasks that communicate)
    busbw_gbps: float | None = None       # sum of bus bytes over the measured time

    @property
    def bound_s(self) -> float:
        return self.bound.bound_s


@dataclass
class PkbJudgement:
    """How a PKB-format file was judged (JudgeConfig.pkb; docs/pkb_compat.md): by which statement, and what the
    other statement says where both apply."""

    pkb_id: int | None
    problem: str                          # PKB's name of the problem ("allgather_gemm_AT")
    statement: str                        # "pkb-env": the task's own, through its mapping | "pkb": PKB's (variant) |
                                          # "none": no statement judges PKB files of this problem (unjudged)
    judged_on: str                        # the task (or variant) whose statement gave the verdict
    differs: str = ""                     # how pkb-env's function departs from PKB's, where it does on purpose
    pkb_rule: bool | None = None          # whether PKB's own check passes on the trials (compat/rule.py)
    pkb_env_verdict: str | None = None    # pkb-env's own verdict, where PKB's statement judged and both apply
    pkb_env_error: str | None = None
    note: str = ""                        # the two statements' verdicts in words, where they differ


@dataclass(eq=False)
class EvaluationRecord:
    """All that is known about one evaluation of one action (the module docstring)."""

    task: str
    world_size: int
    preset: str
    dtype: str
    executor: str
    hardware: str
    stage: Stage = Stage.PARSE
    verdict: Verdict | None = None
    error: str | None = None
    performance_available: bool = True
    parse: ParseResult | None = None
    screen: ScreenResult | None = None
    build: BuildResult | None = None
    run: RunResult | None = None
    verify: VerifyResult | None = None        # the trials, element by element
    timing: TimingResult | None = None
    timed_check: VerifyResult | None = None   # every timed call, by fingerprints against the reference's replay
    roofline: RooflineResult | None = None
    failure: StageFailure | None = None       # the ranks' failure that ended the step, if one did
    reference: ReferenceWork | None = None
    flags: list[Flag] = field(default_factory=list)     # the screen's and the verdict's (exploits found at run time)
    stage_seconds: dict[str, float] = field(default_factory=dict)   # the candidate's stages only
    wall_s: float = 0.0                                 # the whole step, the reference's part included
    feedback: str = ""
    # What protected the judge while the candidate ran (the executor's isolation(), in words): pid, network,
    # filesystem, privileges (and user where a user namespace was needed). Empty when nothing ran.
    containment: dict[str, str] = field(default_factory=dict)
    pkb: PkbJudgement | None = None       # a PKB-format file (JudgeConfig.pkb): the statement that judged it

    @property
    def correct(self) -> bool:
        return self.verdict is Verdict.CORRECT

    @property
    def exploit_flags(self) -> list[Flag]:
        return [f for f in self.flags if f.severity is Severity.EXPLOIT]

    @property
    def unmeasured(self) -> str | None:
        """Why no time of this step can count, where none can: the executor's ranks time-slice one device, or
        the judge's timing was off (JudgeConfig.timing: verdicts only)."""
        if self.performance_available:
            return None
        if "emulated" in self.executor:
            return f"the {self.executor} executor time-slices ranks on one device"
        return "this judge gives verdicts only (its timing is off)"

    @property
    def speedup(self) -> float | None:
        """None when performance is unavailable, not measured, or not believed, or the answer is not correct
        (a step's timed calls are checked after they are timed: a time can exist for a wrong answer)."""
        if not self.performance_available or self.timing is None or self.timing.suspect or not self.correct:
            return None
        return self.timing.speedup

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """The 90% interval of the speedup from the step's pairs, where the speedup counts and one exists."""
        t = self.timing
        if self.speedup is None or t.speedup_low is None or t.speedup_high is None:
            return None
        return t.speedup_low, t.speedup_high

    def distinguishable_from(self, target: float) -> bool:
        """True when the speedup is measured and its interval (where it has one) lies wholly on one side of
        `target`: a correct step near 1x whose pairs straddle 1 is neither faster nor slower, and says so."""
        interval = self.speedup_interval
        return self.speedup is not None and (interval is None or not interval[0] <= target <= interval[1])

    @property
    def roofline_fraction(self) -> float | None:
        if not self.performance_available or self.roofline is None or (self.timing is not None and self.timing.suspect):
            return None
        return self.roofline.fraction

    @property
    def judged(self) -> bool:
        """False when the judge could not judge the step (Verdict.JUDGE_ERROR): the record says nothing of the code."""
        return self.verdict is not Verdict.JUDGE_ERROR

    @classmethod
    def unjudged(cls, task: str, world_size: int, preset: str, dtype: str, executor: str, hardware: str,
                 error: str) -> "EvaluationRecord":
        """The record of a step the judge could not judge (a lost worker, a deadline, the reference's
        failure): `error` says why, the feedback tells the agent it is not its code's fault."""
        return cls(task=task, world_size=world_size, preset=preset, dtype=dtype, executor=executor,
                   hardware=hardware, verdict=Verdict.JUDGE_ERROR, error=error, performance_available=False,
                   feedback=f"The judge could not judge this step, through no fault of the code: {error}. "
                            f"It earns no reward; submit it again.")

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EvaluationRecord":
        """The record `to_dict()` gave (read back field by field by type; unknown keys refused)."""
        return from_jsonable(cls, data, "record")

    def __eq__(self, other: object) -> bool:
        """Equal when their JSON forms are (NaN errors compare equal to themselves there, as they should)."""
        return isinstance(other, EvaluationRecord) and self.to_dict() == other.to_dict()

    __hash__ = None  # mutable


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, mappings and sequences as JSON-safe dicts, strings and lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # strict JSON has no inf/nan
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def from_jsonable(cls: type, data: Any, where: str) -> Any:
    """The inverse of `jsonable` for a dataclass `cls`: every field read back by its annotation."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: {cls.__name__} has no field(s) {unknown}")
    return cls(**{name: _read(hints[name], value, f"{where}.{name}") for name, value in data.items()})


def _read(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _read(inner, value, where)
    if origin is list:
        return [_read(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        return tuple(_read(args[0], v, where) for v in value)
    if origin is dict:
        return {k: _read(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return from_jsonable(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint is float:
        return float(value)  # "inf", "-inf" and "nan" as jsonable wrote them, and JSON's ints
    return value

