"""The reference's part of a step: its outputs (what the candidate must match), its time (once per task, for
the prompt and the plan of a candidate's bursts), its replay of the candidate's timed calls (the other half
of each pair of the speedup, and their check). All of it runs on the trusted reference ranks, only while no
process of the step's candidate exists or runs (stopped: `Pairing`), and is billed to the reference
(`ReferenceWork` in the record), never to the candidate's stages.

The reference's time is measured once per task, preset, dtype, world size and hardware, by the same
protocol and in the same placement as candidates, and cached in this object (`time_for`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from pkb_env.contract import CostModel, Peaks
from pkb_env.errors import JudgeError
from pkb_env.executors.interface import BurstRecord, CandidateSession, Executor, ReferenceSession, TrialOutputs
from pkb_env.judge.context import StepContext
from pkb_env.config import TimingProtocol
from pkb_env.judge.roofline import roofline
from pkb_env.judge.stopwatch import Stopwatch
from pkb_env.judge.timing import (BurstLog, CallLimits, PairedBurst, TimedWork, overheads, run_bursts, summarize,
                                  suspect_reason)
from pkb_env.record import TimingResult


@dataclass
class ReferenceTiming:
    """The reference's time and its honest reporting overheads (the clock check's allowance comes from them)."""

    result: TimingResult
    overheads: np.ndarray
    sizes: tuple[int, int]      # (input bytes, output bytes) of one call, the largest rank's


class Reference:
    """The reference's work for the steps of one judge, and its cache of times."""

    def __init__(self, executor: Executor, protocol: TimingProtocol, clock: str):
        self.executor = executor
        self.protocol = protocol
        self.clock = clock
        self._times: dict[tuple, ReferenceTiming] = {}

    def outputs(self, ctx: StepContext) -> list[TrialOutputs]:
        """The expected outputs of the step's trials (the same secret seeds the candidate's trials get)."""
        seeds = ctx.trial_seeds()
        return self.executor.reference(ctx.task.name,
                                       lambda ranks: ranks.trials(ctx.workload, seeds, ctx.other_dtypes))

    def cached(self, ctx: StepContext, hardware: str) -> ReferenceTiming | None:
        return self._times.get(self._key(ctx, hardware))

    def time_for(self, ctx: StepContext, hardware: str, sizes: tuple[int, int], floor_s: float | None,
                 ) -> ReferenceTiming:
        """The reference timed by the candidates' protocol in their placement, once per task and size.

        `sizes`: (input, output) bytes of one call, from the reference's own trials (they bound how many
        calls a burst may hold). `floor_s`: the task's least possible time here; the reference is correct
        by definition, so a time below it is the judge's fault (JudgeError), never a candidate's."""
        key = self._key(ctx, hardware)
        if key not in self._times:
            work = TimedWork(ctx.workload, ctx.seeds)

            def measure(ranks: ReferenceSession) -> BurstLog:
                limits = call_limits(self.protocol, ranks.memory_bytes, sizes, None)
                return run_bursts(ranks, work, self.protocol, limits, self.protocol.reference_budget_s)

            log = self.executor.reference(ctx.task.name, measure)
            result = summarize(log, self.clock)
            problem = suspect_reason(result.time_s, floor_s)
            if problem:
                raise JudgeError(f"the judge's own clock is wrong: the reference measured {problem}")
            self._times[key] = ReferenceTiming(result, overheads(log), sizes)
        return self._times[key]

    def pairing(self, ctx: StepContext, candidate: CandidateSession, stage: Stopwatch) -> "Pairing":
        return Pairing(self, ctx, candidate, self.protocol.statistic, stage)

    def replay(self, ctx: StepContext, paired: PairedBurst) -> BurstRecord:
        """A candidate's burst on the reference, same inputs, timed alike: the other half of the pair. Its
        outputs stay on the reference ranks for `ask_fingerprints`."""
        return self.executor.reference(ctx.task.name, lambda ranks: ranks.replay(
            ctx.workload, paired.seeds, paired.calls, paired.marks_every))

    def fingerprints(self, ctx: StepContext, paired: PairedBurst) -> list[dict]:
        """Per rank, the last replay's fingerprints with the candidate's seed and sample (and the bound terms).
        Not retried: fresh ranks would not hold the replay."""
        return self.executor.reference(ctx.task.name, lambda ranks: ranks.fingerprints(
            paired.burst, paired.fingerprint_seed, ctx.rules, paired.sample), retry=False)

    def ask_fingerprints(self, ctx: StepContext, paired: PairedBurst) -> None:
        """The last replay's fingerprints, with the candidate's seed and sample (and the bound terms), asked for
        without waiting; `read_fingerprints` reads them. Not retried: fresh ranks would not hold the replay."""
        self.executor.reference(ctx.task.name, lambda ranks: ranks.ask_fingerprints(
            paired.burst, paired.fingerprint_seed, ctx.rules, paired.sample), retry=False)

    def read_fingerprints(self, ctx: StepContext) -> list[dict]:
        """The answer to `ask_fingerprints`."""
        return self.executor.reference(ctx.task.name, lambda ranks: ranks.read_fingerprints(), retry=False)

    def forget(self, task: str | None) -> None:
        """Drop the cached times of `task` (None: all)."""
        for key in [k for k in self._times if task is None or k[0] == task]:
            del self._times[key]

    @staticmethod
    def _key(ctx: StepContext, hardware: str) -> tuple:
        return ctx.task.name, ctx.preset, ctx.dtype, ctx.world_size, hardware


class Pairing:
    """The reference's half of the step's pairs (docs/timing.md, "Paired speedup"): next to each scored burst
    of the candidate (right after it, or just before it: the order alternates), with every process of the
    candidate stopped, the reference replays the same calls, timed alike (`timed`). The pair's halves are
    milliseconds apart, so the host's drift cancels in its ratio. Then both sides fingerprint their halves
    (`fingerprints`): at once where the candidate is contained (it cannot reach the reference's processes,
    and neither half is timed then), else inside the freeze. The replay's fingerprints check every timed call
    (judge/verify.py, `verify_timed`).

    All of it runs on the reference's own watch (`spent`): the candidate's TIME stage (`stage`, its watch)
    hands it those blocks, so it is billed to the reference (record.reference.replay_s) where it is spent."""

    def __init__(self, reference: Reference, ctx: StepContext, candidate: CandidateSession, statistic: str,
                 stage: Stopwatch):
        self.reference, self.ctx, self.candidate = reference, ctx, candidate
        self.concurrent = candidate.contained
        self.log = BurstLog(statistic=statistic)    # per scored candidate burst: the replay, its fingerprints
        self.stage = stage
        self.spent = Stopwatch()

    @property
    def seconds(self) -> float:
        """The reference's part so far."""
        return self.spent.seconds

    def timed(self, paired: PairedBurst) -> None:
        """The reference's timed half of pair `paired.burst`, every process of the candidate stopped."""
        with self.stage.handing(self.spent), self.candidate.frozen():
            self.log.bursts.append(self.reference.replay(self.ctx, paired))
            if not self.concurrent:
                self.log.fingerprints.append(self.reference.fingerprints(self.ctx, paired))

    def fingerprints(self, paired: PairedBurst) -> Callable[[], None]:
        """Start the fingerprints of the reference's half (where they are not made already); the function
        returned waits for them. The candidate fingerprints its own half in between."""
        if not self.concurrent:
            return lambda: None
        self.reference.ask_fingerprints(self.ctx, paired)

        def finish() -> None:
            with self.stage.handing(self.spent):
                self.log.fingerprints.append(self.reference.read_fingerprints(self.ctx))

        return finish


def call_limits(protocol: TimingProtocol, memory_bytes: int, sizes: tuple[int, int],
                reference: ReferenceTiming | None) -> CallLimits:
    """Calls per burst (memory) and in all (the reference's replay) for a session with `memory_bytes`."""
    replayed = reference.result.time_s if reference is not None else None
    return CallLimits.from_sizes(protocol, *sizes, memory_bytes, replayed)


def physical_floor(cost: CostModel, datasheet: Peaks | None) -> float | None:
    """The least time the task can take here: its cost model bounded at the datasheet's peaks (None where
    the topology has none). The one input of the suspect rule (timing.suspect_reason)."""
    floor = roofline(cost, 1.0, None, datasheet)
    return floor.bound.bound_s if floor is not None else None
