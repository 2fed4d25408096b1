"""`JudgeConfig`: every setting the judge has, in one frozen, picklable object (docs/architecture.md, "The service"),
with `TimingProtocol`, the burst protocol's targets and budgets (docs/timing.md; the protocol itself is
judge/timing.py).

One object configures a `JudgeService` wherever it runs: in this process, in a Ray actor on another node,
behind a server. Each field carries its default and the reason for it beside it, as CleanRL's `Args` does;
nothing else in the package holds a deadline, a limit or a switch of its own (what remains as module
constants are properties of the protocols: nonce lengths, fingerprint block sizes, page sizes).

    JudgeConfig()                                          # CPU ranks where there is no GPU, 4 of them, tiny
    JudgeConfig(executor="cuda", world_size=8, preset="bench")
    JudgeConfig.from_mapping({"world_size": 2, "executor": "cpu"})   # YAML, reward kwargs, request bodies

Three fields read the environment when the config is made, so that the process which makes it decides,
and the value travels with the object to wherever it is used: `namespaces` (PKB_ENV_NAMESPACES=0 turns
the cells' namespaces off), `require_containment` (PKB_ENV_REQUIRE_CONTAINMENT=1 refuses to run without
them), `drop_privileges` (PKB_ENV_DROP_PRIVILEGES=0 keeps the judge's uid in candidate ranks), and
`cache_dir` (PKB_ENV_CACHE, else ~/.cache/pkb_env).
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

EXECUTORS = ("auto", "cpu", "cuda", "cuda-emulated")
CALIBRATIONS = ("auto", "cached")


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value != "0"


def default_cache_dir() -> str:
    return os.environ.get("PKB_ENV_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pkb_env")


# The figure a step reports as a code's "time per call", in words, by TimingProtocol.statistic: the prompt's rules,
# the feedback and the stage table all call it that and say this (three names for one figure confused a reader).
STATISTIC_WORDS = {
    "burst-median": "the median over bursts of each burst's time per call, on its slowest rank",
    "interval-min": "the median over bursts of the time per call in each burst's fastest interval, on its slowest rank",
}


@dataclass(frozen=True)
class TimingProtocol:
    """Targets and budgets of the bursts; `for_clock` gives the defaults of a placement's clock."""

    burst_s: float = 0.04            # target wall time of one burst
    warmup_bursts: int = 3           # at most, after the one-call sizing burst; fewer once the plan stops growing
    budget_s: float = 0.25           # wall time for a candidate's scored bursts (fingerprinting included)
    reference_budget_s: float = 1.0  # the same for the reference (measured once per task and size, cached)
    calibration_budget_s: float = 0.1  # the same per calibration size
    min_bursts: int = 5
    max_bursts: int = 64
    rse_target: float = 0.01         # unpaired (the reference's own timing): stop when the relative standard
                                     # error of burst figures is below this
    interval_target: float = 0.05    # paired (a candidate): stop when the speedup's 90% interval lies within this
                                     # fraction of the estimate on both sides (judge/pair_stats.settled) ...
    interval_budget_s: float | None = None  # ... or when this much scored time is spent (None: budget_s); the
                                     # budget_s is spent first only where the interval is narrow before it
    min_calls: int = 8               # calls per burst, at least (fewer only where 8 would take over 4 bursts' time)
    max_calls: int = 4096            # calls per burst, at most (and as memory allows)
    jitter: float = 0.2              # calls per burst drawn uniformly in [1 - jitter, 1 + jitter] x the plan
    marks: int = 16                  # intermediate marks per burst (per-call percentiles of mark intervals)
    samples: int = 3                 # timed outputs shipped whole per step (one per early burst, chosen after it)
    memory_fraction: float = 0.1     # of a rank's device memory (or address space) for held inputs, and for outputs
    replay_budget_s: float = 0.5     # reference time the check of a step's timed calls may take (CallLimits)
    clock_floor_s: float = 0.004     # the least allowance for the overhead of reporting a burst
    clock_factor: float = 4.0        # allowance = max(floor, factor x the reference's 90th-percentile overhead)
    clock_relative: float = 0.02     # ... plus this fraction of the burst's wall time (check_claims)
    hidden_work_s: float = 50e-6     # device busy after the end beyond 2x the reference's plus this: escaped work
    contended_s: float = 1e-3        # the reference's device wait before a replay above this: a stopped candidate's
                                     # kernel held the GPU (ranks/clocks.device_wait; idle: tens of microseconds)
    statistic: str = "burst-median"  # the figure of a burst (BurstLog.figures): "burst-median" | "interval-min"

    @classmethod
    def for_clock(cls, kind: str) -> "TimingProtocol":
        """GPU bursts are short (a millisecond-scale start skew does not exist behind a device gate), and
        more of them fit the budget: shorter bursts gave more pairs a step, a narrower spread of the reference
        against itself and a shorter step (docs/measurements/2026-12-03-timing-h200.md, "Shorter bursts, more
        pairs"); calls too slow for 2 ms get `min_calls` each. The scored budget buys pairs: 0.35 s narrowed the
        reference against itself over steps against 0.25 s for a little more time a step (the same page, "The
        pseudo-median, and a longer scored budget"). Pairs then go on until the speedup's interval is within 3%
        or 0.75 s is spent: a pair's ratio spreads by ~0.30 on one H200 (p90 - p10 over the estimate), so a
        step's estimate needs ~24 pairs to land within 5% of the truth 19 times in 20 (issue 46's aim), about 0.75 s
        at ~30 ms a pair; a longer cap would cost judged steps per second (docs/timing.md, "How many pairs").
        CPU ranks share cores, so their bursts are long enough to swamp scheduling and reporting delays."""
        if kind == "cuda":
            return cls(burst_s=0.002, budget_s=0.35, reference_budget_s=0.5, clock_floor_s=0.0005,
                       replay_budget_s=0.75, interval_target=0.03, interval_budget_s=0.75)
        if kind == "host":
            return cls(statistic="interval-min", marks=32, clock_relative=0.2, replay_budget_s=0.75,
                       interval_budget_s=0.6)
        raise ValueError(f"unknown clock {kind!r}")

    @classmethod
    def quick(cls, kind: str) -> "TimingProtocol":
        """Shorter bursts and budgets (tests, CPU sanity runs): coarser figures, same rules, except that a paired
        series ends at `budget_s` (about 3 pairs) instead of going on until its interval settles, after one
        warm-up burst: the interval's longer budget doubled a timed step on CPU ranks (1.4-1.8 s against 0.7-1.0 s
        warm at world size 4), and most of the test suite's steps are timed."""
        return replace(cls.for_clock(kind), burst_s=0.015, budget_s=0.05, reference_budget_s=0.15, min_bursts=3,
                       warmup_bursts=1, replay_budget_s=0.3, interval_budget_s=None)


class ConfigError(ValueError):
    """A setting the judge cannot take; the message names it and the fix."""


class UnknownSetting(ConfigError, TypeError):
    """A name JudgeConfig has no setting for, with the closest one: a ConfigError like every bad setting, and a
    TypeError as any unexpected keyword argument is (`JudgeConfig(wrld_size=4)` was a bare TypeError)."""


def _refuses_unknown_names(cls):
    """The dataclass's own __init__, behind a check that names the closest setting to an unknown keyword."""
    generated = cls.__init__

    @functools.wraps(generated)
    def __init__(self, *args, **kwargs):
        _check_names(kwargs)
        generated(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@_refuses_unknown_names
@dataclass(frozen=True)
class JudgeConfig:
    # -- where ranks run, and the problem they run ------------------------------------------------------
    executor: str = "auto"
    """cpu (rank processes over gloo), cuda (one process per GPU, NCCL), cuda-emulated (several ranks per
    GPU: correctness only), auto (cuda with enough GPUs, cuda-emulated with fewer, cpu without any)."""
    world_size: int = 4
    """Ranks a candidate runs on; limited by the machine (executors/capacity.py), checked before anything starts."""
    preset: str = "tiny"
    """Problem size: tiny (CPU ranks in milliseconds), bench (PKB's size), large (where a task has it)."""
    dtype: str | None = None
    """Element type; None takes each preset's own (the task's spec)."""

    # -- what one step does ---------------------------------------------------------------------------
    trials: int = 3
    """Untimed calls checked element by element before any timing: enough for a wrong shard or a skipped
    rank to show, few enough that a CPU step stays well under a second (every timed call is checked too)."""
    protocol: TimingProtocol | None = None
    """The burst protocol's targets and budgets; None: the placement clock's defaults (TimingProtocol.for_clock)
    with `protocol_changes`."""
    protocol_changes: tuple[tuple[str, Any], ...] = ()
    """(field, value) pairs of TimingProtocol changed from the clock's defaults (a config file's `protocol:`
    mapping): the clock is the placement's, known only where the judge runs (`executor="auto"`), and its
    defaults differ (2 ms bursts on GPUs, 40 ms on CPU ranks; interval-min there). Unused with `protocol`."""
    timing: bool = True
    """False: verdicts only. A correct candidate is not timed (no speedup, no roofline; the reward's performance
    term "not measured", as on emulated ranks) and no calibration is made: the untimed part of a step, for a
    correctness pass over many candidates (an RL batch's wrong majority, a corpus, CI's tests of verdicts), in
    about half a correct step's time on CPU ranks (docs/timing.md, "Verdicts only")."""
    verify_lanes: int = 0
    """Judges of verdicts only beside the timed one, for a batch (`LocalClient.map` / `submit_many`): each
    candidate's untimed work (parse, screen, build, trials, check) runs on one of these lanes, several candidates at
    once; those found correct are then timed one at a time on the client's own judge, once every lane has finished,
    so nothing else runs while a candidate is timed, and a candidate that fails never waits for a timed one. 0: the
    batch's steps run one after another. Each lane is a judge of its own (a zygote, reference ranks, spares; ranks
    unpinned; emulated ranks where the timed judge has GPUs): processes and memory a host must have to spare
    (docs/scale_out.md, "Verify together, time alone")."""
    max_action_chars: int = 200_000
    pkb: bool = False
    """Candidates are PKB-format files (ParallelKernelBench's signatures, outputs and `utils.*` helpers): each is
    screened against PKB's signature and called through the task's PKB adapter, on the task's PKB variant where
    it has one, with pkb-env's own verdict beside it where both statements apply (docs/pkb_compat.md)."""
    """An action (a model's completion) longer than this is refused unread: no kernel module needs more."""

    # -- deadlines (seconds) --------------------------------------------------------------------------
    step_budget_s: float = 600.0
    """The hard wall-clock budget of one step, counted from its start, compiles included: every wait on the
    candidate's ranks, and every compile they ask for, ends by then (a candidate past it has timed out), so a
    training loop never waits longer for one completion. The reference's own work is bounded by the
    deadlines below (its time is measured once per task and size, then cached)."""
    start_timeout_s: float = 120.0
    """A rank set's start (CUDA contexts, the process group, NCCL's connections): minutes only when a
    machine is badly overloaded; past it the judge says so (a start is never the candidate's fault)."""
    build_timeout_s: float = 60.0
    """Importing the candidate's module in every rank (the compiles it asks for have deadlines of their own)."""
    trial_timeout_s: float = 30.0
    """All trials of one step: a hang or a deadlock costs this long, once."""
    timing_timeout_s: float = 60.0
    """One request of the timing protocol (a burst, its fingerprints, the reference's replay of it)."""
    freeze_timeout_s: float = 1.0
    """Stopping every process of a candidate before the reference's replay of its burst (sandbox/freezer.py);
    a candidate whose processes keep forking past it fails the step."""
    compile_timeout_s: float = 300.0
    """One NVRTC or nvcc build in a build cell."""
    extension_timeout_s: float = 480.0
    """One torch extension build (load_inline: torch's headers make these slow, tens of seconds:
    docs/measurements/2026-12-01-containment-cost-cpu.md)."""
    compile_budget_s: float = 480.0
    """The judge-side compile time one step's ranks may ask for in all (then every request is refused)."""
    failure_grace_s: float = 0.3
    """After one rank fails, how long the others may still report, so that the message names each rank's fate."""

    # -- rank sets ------------------------------------------------------------------------------------
    spares: int | None = None
    """Candidate rank sets kept pre-started; None: the placement's (one per start phase and a ready one on
    GPUs, where cells have namespaces; one elsewhere: docs/timing.md)."""
    fresh_starts: int = 2
    """Tries at a new candidate rank set when no spare answered (a host briefly out of processes: EAGAIN)."""
    fresh_start_pause_s: float = 1.0
    """Between those tries."""
    pin_ranks: bool = True
    """On GPUs, rank r of every rank set (the reference's and each candidate's) runs on one core, the same for
    all, once it serves a step: a core's speed is its process's (host-bound calls read far apart on different
    cores of one host: docs/measurements/2026-12-03-timing-h200.md), and a pair's ratio cancels it only where
    both halves ran on one core (docs/timing.md, "One core per rank"). Needs two cores per rank; off only to
    compare."""

    # -- containment (defaults from the environment: the module docstring) --------------------------
    namespaces: bool = field(default_factory=lambda: _env_flag("PKB_ENV_NAMESPACES", True))
    """Each rank set and build in its own PID, mount and network namespaces, where the machine allows them."""
    require_containment: bool = field(default_factory=lambda: _env_flag("PKB_ENV_REQUIRE_CONTAINMENT", False))
    """Refuse to run a candidate without namespaces (ContainmentError naming the fix) instead of falling back."""
    drop_privileges: bool = field(default_factory=lambda: _env_flag("PKB_ENV_DROP_PRIVILEGES", True))
    """Candidate ranks and builds of a root judge run as nobody; off only to diagnose a machine."""

    # -- limits ---------------------------------------------------------------------------------------
    log_tail_bytes: int = 1500
    """Of a failing rank's output, the last bytes shown (the feedback keeps a few hundred characters)."""
    build_memory_bytes: int = 16 << 30
    """Address space of one compiler process (nvcc on torch's headers needs a few GiB)."""
    build_cpu_seconds: int = 600
    """CPU time of one compiler process."""
    build_file_bytes: int = 512 << 20
    """Largest file a build may write (objects, the shared library)."""
    build_processes: int = 256
    """Processes of the candidate uid during a build (ninja's jobs, the compiler's drivers)."""
    max_build_bytes: int = 256 << 20
    """Largest built object the judge takes back from a build cell."""

    # -- calibration and caches -----------------------------------------------------------------------
    calibration: str = "auto"
    """auto: measure latency, bandwidth and peaks at the first open where none is cached for this hardware
    and world size; cached: use a cached one, else the datasheet's peaks (never measure). Never inside a step."""
    calibration_sizes: tuple[int, ...] | None = None
    """all_reduce sizes (bytes) whose best bus bandwidth is calibrated; None: the placement's."""
    cache_dir: str = field(default_factory=default_cache_dir)
    """Calibrations and built kernels: written only by the judge's own process, never shown to a candidate."""

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise ConfigError("; ".join(problems))

    def _problems(self):
        if self.executor not in EXECUTORS:
            yield f"unknown executor {self.executor!r}; choose one of {', '.join(EXECUTORS)}"
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            yield f"world_size must be a positive integer, got {self.world_size!r}"
        if not isinstance(self.preset, str) or not self.preset:
            yield f"preset must be a preset's name (tiny, bench, large), got {self.preset!r}"
        if self.dtype is not None and not isinstance(self.dtype, str):
            yield f"dtype must be a dtype's name such as 'float32' or None, got {self.dtype!r}"
        if isinstance(self.verify_lanes, bool) or not isinstance(self.verify_lanes, int) or self.verify_lanes < 0:
            yield f"verify_lanes must be an integer >= 0 (0: no lanes), got {self.verify_lanes!r}"
        for name in ("trials", "max_action_chars", "log_tail_bytes", "fresh_starts", "build_memory_bytes",
                     "build_cpu_seconds", "build_file_bytes", "build_processes", "max_build_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "fresh_starts" else 1):
                yield f"{name} must be a positive integer, got {value!r}"
        for name in ("step_budget_s", "start_timeout_s", "build_timeout_s", "trial_timeout_s", "timing_timeout_s",
                     "freeze_timeout_s", "compile_timeout_s", "extension_timeout_s", "compile_budget_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                yield f"{name} must be a positive number of seconds, got {value!r}"
        for name in ("failure_grace_s", "fresh_start_pause_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                yield f"{name} must be a number of seconds >= 0, got {value!r}"
        if self.spares is not None and (isinstance(self.spares, bool) or not isinstance(self.spares, int)
                                        or self.spares < 1):
            yield f"spares must be a positive integer or None (the placement's), got {self.spares!r}"
        if self.protocol is not None and not isinstance(self.protocol, TimingProtocol):
            yield (f"protocol must be a TimingProtocol (e.g. TimingProtocol.for_clock('host')) or None, got "
                   f"{type(self.protocol).__name__}")
        if not isinstance(self.protocol_changes, tuple) or not all(
                isinstance(c, tuple) and len(c) == 2 for c in self.protocol_changes):
            yield (f"protocol_changes must be a tuple of (field, value) pairs (in a config file or request, write a "
                   f"`protocol:` mapping of field: value), got {self.protocol_changes!r}")
        else:
            known = {f.name for f in dataclasses.fields(TimingProtocol)}
            unknown = sorted({name for name, _ in self.protocol_changes} - known)
            if unknown:
                yield f"protocol: unknown setting(s) {unknown}; TimingProtocol takes {sorted(known)}"
        if self.calibration not in CALIBRATIONS:
            yield f"calibration {self.calibration!r} is unknown; choose one of {', '.join(CALIBRATIONS)}"
        if self.calibration_sizes is not None and not (
                isinstance(self.calibration_sizes, tuple) and self.calibration_sizes
                and all(isinstance(s, int) and s > 0 for s in self.calibration_sizes)):
            yield f"calibration_sizes must be a tuple of positive byte counts or None, got {self.calibration_sizes!r}"
        for name in ("namespaces", "require_containment", "drop_privileges", "pin_ranks", "pkb"):
            if not isinstance(getattr(self, name), bool):
                yield f"{name} must be true or false, got {getattr(self, name)!r}"
        if not isinstance(self.cache_dir, str) or not self.cache_dir:
            yield f"cache_dir must be a directory's path, got {self.cache_dir!r}"

    def protocol_for(self, clock: str) -> TimingProtocol:
        """The protocol a judge whose placement has `clock` runs: `protocol`, else the clock's defaults with
        `protocol_changes`."""
        return self.protocol or replace(TimingProtocol.for_clock(clock), **dict(self.protocol_changes))

    def replace(self, **changes: Any) -> "JudgeConfig":
        """A copy with `changes` (unknown names refused with the closest known one)."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "JudgeConfig":
        """From plain data (YAML, a trainer's reward kwargs, a request body): keys are field names (dashes
        allowed), `protocol` a mapping of TimingProtocol's fields changed from the placement clock's defaults
        (`protocol_changes`; one that names every field is the whole protocol), `calibration_sizes` a list."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"a judge config must be a mapping of setting: value, got {type(values).__name__}")
        data = {str(k).replace("-", "_"): v for k, v in values.items()}
        _check_names(data)
        if isinstance(data.get("protocol"), Mapping):   # unknown fields: refused by the config's own checks
            changes = data.pop("protocol")
            if set(changes) == {f.name for f in dataclasses.fields(TimingProtocol)}:
                data["protocol"] = TimingProtocol(**changes)   # every field: the same on every clock, canonical
            else:
                data["protocol_changes"] = tuple(sorted(changes.items()))
        if isinstance(data.get("calibration_sizes"), list):
            data["calibration_sizes"] = tuple(data["calibration_sizes"])
        return cls(**data)


def _check_names(values: Mapping[str, Any]) -> None:
    known = [f.name for f in dataclasses.fields(JudgeConfig)]
    for name in values:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UnknownSetting(f"unknown judge setting {name!r}; {hint}JudgeConfig takes {', '.join(known)}")
