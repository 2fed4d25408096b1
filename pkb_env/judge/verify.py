"""The verify stages, in the judge's process: the trials element by element, every timed call by fingerprints.

Both compare with outputs that only the trusted reference ranks computed and only this process holds.
Each output is compared by its own check (StepContext.checks: the task's tolerance at this dtype and
size; exact for integers, booleans and data movement; rows as a set for unordered outputs).
"""
from __future__ import annotations

from pkb_env.compat.rule import pkb_close
from pkb_env.executors.interface import TrialOutputs
from pkb_env.contract.results import UPDATED
from pkb_env.judge import replicas, timed_causes
from pkb_env.judge.compare import compare_outputs
from pkb_env.judge.context import StepContext
from pkb_env.judge.fingerprints import differences, reported
from pkb_env.judge.timing import BurstLog
from pkb_env.record import Mismatch, RankFailure, Stage, StageFailure, VerifyResult
from pkb_env.wire.channel import ChannelError


def verify_trials(ctx: StepContext, expected: list[TrialOutputs], got: list[TrialOutputs]) -> VerifyResult:
    """Every rank's outputs of every trial against the reference's; aliasing and input mutation count."""
    mismatches: list[Mismatch] = []
    checked = 0
    for k, (label, exp, cand) in enumerate(zip(ctx.trial_labels, expected, got)):
        checks = ctx.trial_checks(k)   # a trial in another dtype (contract/clauses.py) at that dtype's tolerance
        for rank, (e, g) in enumerate(zip(exp.outputs, cand.outputs)):
            checked += 1
            for path in cand.aliases[rank]:
                mismatches.append(Mismatch(label, rank, path, f"{path} is a view of an input argument; "
                                           f"return a new tensor", kind="view"))
            for path in cand.mutated[rank]:
                mismatches.append(Mismatch(label, rank, path, f"the call modified {path}; inputs must be left "
                                           f"unchanged (copy before working in place)", kind="mutated"))
            mismatches.extend(compare_outputs(e, g, checks, label, rank))
            if exp.updated and exp.updated[rank]:  # state updated in place: its final values, by input name
                state = compare_outputs(exp.updated[rank], cand.updated[rank], checks, label, rank, root=UPDATED)
                mismatches.extend(_untouched(state, cand.unchanged[rank] if cand.unchanged else [],
                                             ctx.task.inplace_arguments()))
        mismatches.extend(replicas.trial_mismatches(ctx.replicas, cand.outputs, cand.updated, label))
    return VerifyResult(correct=not mismatches, checked=checked, mismatches=mismatches)


def _untouched(state: list[Mismatch], unchanged: list[str], places: dict[str, str]) -> list[Mismatch]:
    """The in-place state's mismatches, where the call never wrote a state argument (the rank saw it unchanged)
    folded into one that says so: "N elements differ" sent the candidate looking for a numerical error when it
    had returned a new tensor instead of updating the one it was given."""
    out = list(state)
    for argument in unchanged:
        path = places.get(argument)
        mine = [m for m in out if m.path == path or m.path.startswith(f"{path}[")]
        if not mine:
            continue   # the reference leaves it as it is too
        first = mine[0]
        out = [m for m in out if m not in mine]
        out.append(Mismatch(first.trial, first.rank, path, f"{path} still holds its input value: the call never "
                            f"updated it in place, as the reference does (write the new values into the tensor you "
                            f"were given, e.g. state.copy_(new) or state.add_(...); returning a new tensor does not "
                            f"update it)", kind="untouched"))
    return out
def pkb_rule_holds(expected: list[TrialOutputs], got: list[TrialOutputs], updates: frozenset[str] = frozenset()
                   ) -> bool:
    """Whether every rank's trial outputs pass PKB's own check (compat/rule.py); `updates`: the inputs updated
    in place whose values PKB checks (those its `solution` returns)."""
    for exp, cand in zip(expected, got):
        for rank, (e, g) in enumerate(zip(exp.outputs, cand.outputs)):
            if not pkb_close(e, g):
                return False
            for name in updates:
                if not pkb_close((exp.updated[rank] or {}).get(name), (cand.updated[rank] or {}).get(name)):
                    return False
    return True


def burst_differences(ctx: StepContext, expected: list[dict], got: list[dict], burst: int) -> list:
    """Per rank, (call, difference) for every timed call of burst `burst` that differs from the reference's replay
    (fingerprints.differences); a rank whose fingerprints cannot be read has its ChannelError in place of the list,
    and no rank after it is compared. Made once a burst: by the burst series as it goes (timing.TimedWork.compare,
    to stop at a wrong step), kept in its log, and read back by `verify_timed`."""
    out: list = []
    for rank, (e, g) in enumerate(zip(expected, got)):
        try:
            out.append(differences(e, g, ctx.checks, burst, rank, ctx.task.inplace_arguments()))
        except ChannelError as exc:
            out.append(exc)
            break
    return out


def verify_timed(ctx: StepContext, log: BurstLog, expected: list[list[dict]]) -> VerifyResult | StageFailure:
    """Every timed call of every rank against the reference's replay of the same inputs (`expected`, per
    burst and rank), and where some failed, what their inputs held that the passing calls' did not
    (judge/timed_causes.py). A fingerprint payload the judge cannot read is a forgery of the rank that sent it."""
    mismatches: list[Mismatch] = []
    failed: list[set[int]] = []  # per burst, the calls that differed on some rank
    for b, (exp_ranks, got_ranks) in enumerate(zip(expected, log.fingerprints)):
        failed.append(set())
        compared = log.differences[b] if b < len(log.differences) else burst_differences(ctx, exp_ranks, got_ranks, b)
        for rank, found in enumerate(compared):
            if isinstance(found, ChannelError):
                forged = RankFailure(rank, "forged", f"rank {rank} sent fingerprints no honest rank sends: {found}",
                                     "timed-output check")
                return StageFailure(Stage.TIME, forged.message, [forged])
            failed[b].update(call for call, _ in found)
            mismatches += reported(found, b, rank)
        mismatches += replicas.timed_mismatches(ctx.replicas, ctx.task.inplace_arguments(), got_ranks, b)
    checked = sum(burst.calls for burst in log.bursts) * ctx.world_size
    cause = timed_causes.explain(ctx, log, failed) if mismatches else None
    return VerifyResult(correct=not mismatches, checked=checked, mismatches=mismatches, cause=cause)
