"""The executor interface: what the judge may ask of wherever code runs, and what comes back.

The judge (pkb_env/judge/) is typed on these protocols only. An `Executor` hands out sessions: a
`CandidateSession` on fresh ranks for one step's candidate, and the trusted `ReferenceSession` for the
reference's outputs, timings, replays and the calibration. Their methods are the operations; their
arguments are typed (wire/requests.py: workloads, seeds, rules); their answers are the dataclasses below,
decoded from frames that the rank set has already held to their schemas (wire/messages.py).

Everything about processes stays behind this line: which rank set serves a step, spares and their
phases (nothing starts beside a timed burst: a spare still starting is stopped for the burst and resumed after),
retries of a reference whose ranks died, transport errors. A session raises `RankSetFailed` when ranks
failed or said something no honest rank says (the judge turns each RankFailure into a verdict), and
`JudgeError` (pkb_env/errors.py) when the judge's own machinery failed: never the candidate's fault.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar

from pkb_env.executors.builds import BuildOutcome
from pkb_env.executors.placement import ExecutorInfo, Placement
from pkb_env.tracing import Tracer
from pkb_env.wire.requests import Rules, Seeds, Workload
from pkb_env.wire.services import BuildRequest

T = TypeVar("T")
# Answers a rank's compile request before a deadline (judge/compiler.py): (header, time.monotonic() deadline).
Services = Callable[[dict, "float | None"], tuple[dict, "bytes | None"]]


@dataclass
class TrialOutputs:
    """One untimed call on every rank."""

    outputs: list[Any]            # per rank
    seconds: list[float]          # per rank, the untimed trial call (for deadlines, not for scoring)
    aliases: list[list[str]]      # per rank: output paths that are views of inputs
    mutated: list[list[str]]      # per rank: arguments changed by the call
    shares: list[list[int]]       # per rank: earlier trials whose output memory this output shares
    input_bytes: int = 0          # the largest rank's, for the timing plan (believed from the reference only)
    output_bytes: int = 0
    updated: list[Any] = field(default_factory=list)  # per rank: {input name: final value} of in-place inputs
    unchanged: list[list[str]] = field(default_factory=list)   # per rank: in-place arguments the call left as given


@dataclass
class RankBurst:
    """One rank's report of one burst, and when the judge read it."""

    seen_at: float
    ended_at: float
    busy_s: float
    host_s: float
    idle_s: float | None
    marks: list[float]
    received: float
    wait_s: float | None = None   # GPUs: a tiny kernel's launch to completion before the burst (clocks.device_wait)


@dataclass
class BurstRecord:
    calls: int
    marks_every: int              # a mark after every this many calls
    released: float               # the judge's clock at the release
    ranks: list[RankBurst]


class TimedSession(Protocol):
    """What the timing protocol (judge/timing.py) needs of a session: bursts, and their fingerprints."""

    world_size: int
    memory_bytes: int

    def burst(self, workload: Workload, seeds: list[Seeds], calls: int, marks_every: int,
              capture_every: bool = False) -> BurstRecord:
        """One burst of `calls` calls, every rank gated and released at once; seeds[r] are rank r's base seeds."""

    def fingerprints(self, burst: int, seed: int, rules: Rules, sample: list[int]) -> list[dict]:
        """Per rank: fingerprints of the last burst's outputs and inputs, its problems, the sampled outputs."""

    def ask_fingerprints(self, burst: int, seed: int, rules: Rules, sample: list[int]) -> None:
        """`fingerprints` asked for without waiting; `read_fingerprints` reads them."""

    def read_fingerprints(self) -> list[dict]:
        """The answer to the last `ask_fingerprints`."""


class CandidateSession(TimedSession, Protocol):
    containment: dict[str, str]   # what protects the judge while these ranks run, in words (for the record)

    def load(self, task: str, source: str, pkb: bool = False) -> float:
        """Load `task` (its process groups are built first), then execute the candidate's module on every
        rank; the slowest rank's seconds. `pkb`: a PKB-format module, called through the task's PKB adapter."""

    def trials(self, workload: Workload, seeds: list[list[Seeds]], dtypes: tuple[str, ...] = ()
               ) -> list[TrialOutputs]:
        """One call per seed set; seeds[r][k] are rank r's seeds for call k; `dtypes`: call k's dtype, where
        one differs from the workload's (wire/requests.Trials)."""

    def quiet(self, label: str) -> None:
        """No rank said anything nobody asked for (a late forged report), else RankSetFailed."""

    def frozen(self) -> AbstractContextManager[None]:
        """Every process of the candidate stopped for the block (sandbox/freezer.py), so that the reference
        can be timed beside it; RankSetFailed when they cannot all be stopped (they keep forking)."""

    def end_timing(self) -> None:
        """Nothing more is timed in this step: the candidate's ranks are killed now, without waiting (the
        session's close confirms they are gone), and what starts between timings (the executor's spare rank
        sets) moves on. A session closed without it moves them on once its ranks are gone."""

    @property
    def contained(self) -> bool:
        """The ranks run in namespaces of their own: they cannot see or signal a process of the judge's, so
        the reference's untimed work may run while they run (judge/reference.Pairing)."""


class ReferenceSession(TimedSession, Protocol):
    def trials(self, workload: Workload, seeds: list[list[Seeds]], dtypes: tuple[str, ...] = ()
               ) -> list[TrialOutputs]:
        """As the candidate's."""

    def replay(self, workload: Workload, seeds: list[Seeds], calls: int, marks_every: int) -> BurstRecord:
        """The inputs of a candidate's burst on the reference, timed as a burst (gated and released at once);
        its fingerprints next (`fingerprints`, with the bound terms)."""

    def copy_rates(self, size: int) -> list[list[float]]:
        """[src, dst, GB/s] for every ordered GPU pair (the calibration)."""


class Executor(Protocol):
    info: ExecutorInfo
    placement: Placement              # the candidates'
    reference_placement: Placement    # the reference's (CPU ranks under cuda-emulated)
    world_size: int
    tracer: Tracer                    # where a step's time goes (pkb_env/tracing.py)

    def candidate(self, services: Services | None = None,
                  deadline: float | None = None) -> AbstractContextManager[CandidateSession]:
        """Fresh ranks for one candidate, ready to load it; closed (every process gone) when the block ends.
        No wait inside outlasts `deadline` (time.monotonic())."""

    def reference(self, task: str | None, work: Callable[[ReferenceSession], T], retry: bool = True) -> T:
        """`work` on the trusted reference ranks with `task` loaded (None: nothing loaded, the calibration);
        retried once on fresh ranks when they died (unless `retry` is False: work on what they hold), then
        JudgeError. Only while no candidate process exists or runs (a candidate session's `frozen`), or the
        candidate is `contained`."""

    def build(self, job: BuildRequest, timeout: float) -> "BuildOutcome":
        """One build of a candidate's kernels in a build cell of its own (executors/builds.py)."""

    def prestart(self) -> None:
        """Start what the next step needs now (the reference ranks, spare candidate ranks)."""

    def hold(self) -> None:
        """Nothing of this executor starts or comes down until `release`: another judge times beside it."""

    def release(self) -> None:
        """Undo `hold`."""

    def discard_reference(self) -> None:
        """End the reference ranks; the next request starts fresh ones."""

    def isolation(self) -> dict[str, str]:
        """What containment candidate ranks get here, in words."""

    def process_ids(self) -> list[int]:
        """Every live process the executor owns (for leak checks)."""

    def interrupt(self) -> None:
        """Kill every process now, from any thread (a step in progress elsewhere fails fast); `close` follows."""

    def close(self) -> None:
        """End every process and remove every file the executor made."""
