"""The stages that run candidate code, on the step's fresh candidate ranks: build, trials, timing.

Each is a function of the step context and the candidate's session that returns its own result, or the
`StageFailure` that ends the step there (what every failing rank did, as the judge observed it; the
verdict follows from it in judge/verdict.py). A rank's own account of a failure can only make things
worse for it: a forged frame, a tampered tool or a timing report the judge's clock rules out is an
exploit; nothing a rank says can turn a failure into a success.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from pkb_env.executors.interface import CandidateSession, TrialOutputs
from pkb_env.executors.rank_set import RankSetFailed
from pkb_env.judge.context import StepContext
from pkb_env.judge.pair_stats import pseudo_median, signed_rank_interval
from pkb_env.config import TimingProtocol
from pkb_env.judge.reference import Pairing, ReferenceTiming, call_limits
from pkb_env.judge.timing import (BurstLog, TimedWork, check_claims, clock_allowance, escaped_work,
                                  paired_allowance, run_bursts, summarize, suspect_reason)
from pkb_env.judge.verify import burst_differences
from pkb_env.record import BuildResult, RankFailure, RunResult, Stage, StageFailure, TimingResult


def build(ctx: StepContext, ranks: CandidateSession, source: str, pkb: bool = False) -> BuildResult | StageFailure:
    """Import the candidate's module on every rank (the task's process groups exist by then); `pkb`: a
    PKB-format module, called through the task's PKB adapter."""
    try:
        return BuildResult(seconds=ranks.load(ctx.task.name, source, pkb))
    except RankSetFailed as exc:
        return failure(Stage.BUILD, exc)


def run_trials(ctx: StepContext, ranks: CandidateSession) -> tuple[RunResult, list[TrialOutputs]] | StageFailure:
    """The untimed trials, on the same secret seeds as the reference's; their outputs for the verify stage."""
    start = time.perf_counter()
    try:
        got = ranks.trials(ctx.workload, ctx.trial_seeds(), ctx.other_dtypes)
    except RankSetFailed as exc:
        return failure(Stage.RUN, exc)
    return RunResult(trials=ctx.trials, seconds=time.perf_counter() - start), got


@dataclass
class Timed:
    result: TimingResult     # whole: figures, the reference's time, the speedup, the clock check, any suspicion
    log: BurstLog            # what the judge observed, for the check of every timed call
    pairs: Pairing           # the reference's replay of each scored burst: its timed half and fingerprints


def time_candidate(ctx: StepContext, ranks: CandidateSession, protocol: TimingProtocol, reference: ReferenceTiming,
                   pairs: Pairing, reuses: bool, clock: str, floor_s: float | None) -> Timed | StageFailure:
    """Bursts with fingerprints, each followed by the reference's replay of it (`pairs`, the candidate stopped
    meanwhile); every report held to the judge's clock; the timing record made whole.

    `reuses`: the candidate returned the same memory in two trials (a buffer it refills), so each of its
    timed outputs is copied as its call returns, inside the timed window, as a caller would have to.
    """
    work = TimedWork(ctx.workload, ctx.seeds, rules=ctx.rules, capture_every=reuses,
                     compare=lambda burst, expected, got: burst_differences(ctx, expected, got, burst))
    limits = call_limits(protocol, ranks.memory_bytes, reference.sizes, reference)
    try:
        log = run_bursts(ranks, work, protocol, limits, protocol.budget_s, pair=pairs)
        ranks.quiet("timing")  # a frame nobody asked for (a forged report sent late) is caught here
    except RankSetFailed as exc:
        return failure(Stage.TIME, exc)
    claims = check_claims(log, clock_allowance(protocol, reference.overheads), protocol.clock_relative,
                          paired=paired_allowance(protocol, pairs.log))
    # A series stopped at its first wrong burst may hold one burst: too few for "late in every burst" to tell a
    # forger from a loaded host (seen: an honest wrong candidate flagged at 1 burst under load). Its verdict is
    # wrong whatever its reports say; the timed check says why.
    if claims.problem and not log.stopped_wrong:
        forged = RankFailure(claims.rank, "forged_timing", f"timing reports the judge's clock rules out: "
                                                           f"{claims.problem}", "timing")
        return StageFailure(Stage.TIME, forged.message, [forged])
    figures = summarize(log, clock)
    speedup = reference.result.time_s / figures.time_s if figures.time_s > 0 else None
    suspect = (escaped_work(figures, reference.result, protocol.hidden_work_s)
               or suspect_reason(figures.time_s, floor_s))
    result = TimingResult(**{**vars(figures), "clock_allowance_s": claims.allowance_s,
                             "clock_margin_s": claims.margin_s, "claim_ratio": claims.claim_ratio,
                             "reference_s": reference.result.time_s, "speedup": speedup, "suspect": suspect})
    return Timed(result, log, pairs)


def paired(result: TimingResult, log: BurstLog, reference: BurstLog, contended_s: float) -> TimingResult:
    """The speedup from the step's own pairs (docs/timing.md, "Paired speedup"): burst b of the candidate and
    the reference's replay of the same calls right after it, timed alike, so the host's drift between
    processes, over minutes and over the step cancels in each ratio. speedup = the pseudo-median of the pairs'
    ratios, in logs (`pseudo_median`), with a 90% interval (`signed_rank_interval`); reference_s = time_s x
    speedup (so speedup = reference_s / time_s still); the once-per-task time stays as cached_reference_s
    (the prompt, the calibration and the escaped-work check use it).

    On GPUs the reference probes the device before each replay (ranks/clocks.device_wait): a wait over
    `contended_s` means a kernel of the stopped candidate still held the GPU, slowing the reference's half of
    the pair; such a time is not believed (`suspect`: correct, speed not rewarded)."""
    waits = [r.wait_s for b in reference.bursts for r in b.ranks if r.wait_s is not None]
    if waits:
        result = replace(result, device_wait_s=max(waits))
        if max(waits) > contended_s and result.suspect is None:
            result = replace(result, suspect=(
                f"the GPU was busy while the candidate's processes were stopped for the reference's replay (a "
                f"kernel launched after a burst ended was still running: the reference waited {max(waits) * 1e3:.2f} "
                f"ms for a tiny kernel, idle takes microseconds); work that outlives a call is not credited"))
    ratios = reference.figures() / log.figures()
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if not len(ratios):
        return result
    logs = np.log(ratios)
    speedup = math.exp(pseudo_median(logs))
    p10, p90 = np.percentile(ratios, [10, 90])
    low, high = (None if end is None else math.exp(end) for end in signed_rank_interval(logs))
    return replace(result, speedup=speedup, reference_s=result.time_s * speedup, pairs=int(len(ratios)),
                   speedup_spread=float((p90 - p10) / speedup), cached_reference_s=result.reference_s,
                   speedup_low=low, speedup_high=high, pair_ratios=[float(r) for r in ratios])


def failure(stage: Stage, exc: RankSetFailed) -> StageFailure:
    return StageFailure(stage, grouped(exc.failures), list(exc.failures))


def grouped(failures: list[RankFailure]) -> str:
    """The ranks' failures in one line each kind: ranks that failed alike are named together ("ranks 0, 2
    raised during build: ..."), in rank order of their first."""
    groups: dict[str, list[int]] = {}
    for f in failures:
        prefix = f"rank {f.rank} "
        groups.setdefault(f.message[len(prefix):] if f.message.startswith(prefix) else f.message, []).append(f.rank)
    parts = []
    for text, ranks in groups.items():
        alike = any(f.message == text for f in failures)  # a message that names no rank of its own
        parts.append(text if alike else f"{'ranks' if len(ranks) > 1 else 'rank'} {', '.join(map(str, ranks))} {text}")
    return "; ".join(parts)
