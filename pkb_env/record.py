"""The evaluation record: one object that flows through every stage of a step.

Each stage (parse, screen, build, run, verify, time, roofline, reward) fills in its own part and never
touches another's; the record is what `info["record"]` carries, what wandb logs and what rewards read.
`to_dict()` gives a JSON-safe view.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping


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
    """What happened to the candidate, worst first: the order rewards must respect (docs/architecture.md, "One step")."""

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
    error: str | None = None


@dataclass
class RankFailure:
    """Why a rank did not deliver: raised, exited, was killed, or ran out of time."""

    rank: int
    kind: str          # "exception" | "exit" | "signal" | "timeout" | "protocol" | "limit"
    message: str
    phase: str         # "build" | "trial 0" | "timing" | ...
    log_tail: str = ""


@dataclass
class RunResult:
    trials: int = 0
    seconds: float = 0.0
    failures: list[RankFailure] = field(default_factory=list)
    error: str | None = None
    log_tail: str = ""


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


@dataclass
class VerifyResult:
    correct: bool
    checked: int = 0                       # output sets compared (trials x ranks + timed samples)
    mismatches: list[Mismatch] = field(default_factory=list)
    error: str | None = None


@dataclass
class TimingResult:
    """Step time per call: the max over ranks of each barrier-aligned call, then a statistic over calls."""

    time_s: float                         # the figure of merit: `statistic` over calls (speedup, roofline)
    statistic: str                        # "median" | "min"
    clock: str                            # "host" | "events" (CUDA events, cross-checked with host time)
    median_s: float
    spread: float                         # (p90 - p10) / median over calls
    min_s: float
    max_s: float
    calls: int
    warmup_calls: int
    input_sets: int = 0                   # distinct input sets the timed calls rotated over
    host_gap_s: float | None = None       # median host time minus event time (events clock only)
    reference_s: float | None = None      # the reference's time, same statistic and protocol
    speedup: float | None = None
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
class EvaluationRecord:
    """All that is known about one evaluation of one action."""

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
    verify: VerifyResult | None = None
    timing: TimingResult | None = None
    roofline: RooflineResult | None = None
    flags: list[Flag] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    feedback: str = ""
    # What protected the judge while the candidate ran (the executor's isolation(), in words): pid, network,
    # filesystem, privileges (and user where a user namespace was needed). Empty when nothing ran.
    containment: dict[str, str] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.verdict is Verdict.CORRECT

    @property
    def exploit_flags(self) -> list[Flag]:
        return [f for f in self.flags if f.severity is Severity.EXPLOIT]

    @property
    def speedup(self) -> float | None:
        """None when performance is unavailable, not measured, or not believed."""
        if not self.performance_available or self.timing is None or self.timing.suspect:
            return None
        return self.timing.speedup

    @property
    def roofline_fraction(self) -> float | None:
        if not self.performance_available or self.roofline is None or (self.timing is not None and self.timing.suspect):
            return None
        return self.roofline.fraction

    def fail(self, stage: Stage, verdict: Verdict, error: str) -> "EvaluationRecord":
        """Stop the pipeline at `stage` with a short message for the agent."""
        self.stage, self.verdict, self.error = stage, verdict, error
        return self

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)


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
