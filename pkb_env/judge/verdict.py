"""The verdict: decided once, from the stages' results, with no side effects (docs/architecture.md, "One step").

The order is the one rewards must respect: flagged < unparsable < build_error < runtime_error < wrong <
correct. The screen's exploit flags come before its signature check (an exploit ranks below unparsable
code); a rank failure whose kind says the rank lied (a forged frame, tampered tools, a timing report
the judge's clock rules out) is an exploit too, and adds its flag to the screen's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pkb_env.record import EvaluationRecord, Flag, Severity, Stage, StageFailure, Verdict

# Rank failure kinds that are evidence of an attempt on the judge, and the flag each raises.
EXPLOIT_KINDS = {"forged": "forged_message", "tampered": "runtime_tampering", "forged_timing": "forged_timing"}
# A kernel the judge's compile service refused, raised in a rank after its import: a file that builds its extension
# inside its first call (as most of PKB's corpus does) failed to build, not to run. A rank could claim it of any
# failure, but build_error ranks below runtime_error: a rank's word can only make its verdict worse.
COMPILE_FAILED = re.compile(r"^CompileError: ", re.M)
# Where no data the failing timed calls held tells them from the passing ones (judge/timed_causes.py).
TIMED_WRONG = ("outputs of timed calls differ from the reference (caching, replaying, deferring or skipping work "
               "in some calls?)")


@dataclass(frozen=True)
class Decision:
    stage: Stage            # the last stage reached
    verdict: Verdict
    error: str | None       # the short message for the agent (None when correct)
    flags: list[Flag]       # the screen's, then any the ranks' failures raised


def decide(record: EvaluationRecord) -> Decision:
    parse, screen = record.parse, record.screen
    if parse is None or parse.error:
        return Decision(Stage.PARSE, Verdict.UNPARSABLE, parse.error if parse else "nothing was parsed", [])
    flags = list(screen.flags) if screen else []
    exploits = [f for f in flags if f.severity is Severity.EXPLOIT]
    if exploits:
        return Decision(Stage.SCREEN, Verdict.FLAGGED, "; ".join(f.message for f in exploits), flags)
    if screen is None or screen.error:
        return Decision(Stage.SCREEN, Verdict.UNPARSABLE, screen.error if screen else "nothing was screened", flags)
    if record.failure is not None:
        return _failed(record.failure, flags)
    if record.verify is not None and not record.verify.correct:
        return Decision(Stage.VERIFY, Verdict.WRONG, f"{len(record.verify.mismatches)} mismatch(es)", flags)
    if record.timed_check is not None and not record.timed_check.correct:
        return Decision(Stage.TIME, Verdict.WRONG, record.timed_check.cause or TIMED_WRONG, flags)
    assert record.verify is not None, "a step without a failure reaches the verify stage"
    return Decision(Stage.DONE, Verdict.CORRECT, None, flags)


def _failed(failure: StageFailure, flags: list[Flag]) -> Decision:
    """A rank failure is a build or runtime error, unless a rank was caught lying: what a rank says about
    its own failure (its error kind, its message) can only make the verdict worse."""
    for kind, code in EXPLOIT_KINDS.items():
        found = [f for f in failure.failures if f.kind == kind]
        if found:
            return Decision(failure.stage, Verdict.FLAGGED, failure.error,
                            flags + [Flag(code, Severity.EXPLOIT, found[0].message)])
    built = failure.stage is Stage.BUILD or any(f.kind == "exception" and COMPILE_FAILED.search(f.message)
                                                for f in failure.failures)
    verdict = Verdict.BUILD_ERROR if built else Verdict.RUNTIME_ERROR
    return Decision(failure.stage, verdict, failure.error, flags)
