"""The feedback text: what the agent reads after a step, short and specific enough to act on."""
from __future__ import annotations

from pkb_env.judge.compare import summarize_mismatches
from pkb_env.record import EvaluationRecord, Severity, Stage, Verdict

MAX_LOG_CHARS = 1200
HEADLINES = {
    Verdict.FLAGGED: "REJECTED: the code does something the judge does not allow.",
    Verdict.UNPARSABLE: "NOT RUN: the action could not be read as a module defining `solution`.",
    Verdict.BUILD_ERROR: "BUILD FAILED: importing the module (or compiling its kernels) failed.",
    Verdict.RUNTIME_ERROR: "RUN FAILED: a rank raised, crashed or did not finish in time.",
    Verdict.WRONG: "WRONG: outputs differ from the reference.",
    Verdict.CORRECT: "CORRECT on every rank.",
}


def write_feedback(record: EvaluationRecord) -> str:
    lines = [HEADLINES.get(record.verdict, "NOT JUDGED: the judge stopped before a verdict.")]
    if record.error and (record.verdict is not Verdict.WRONG or record.stage is Stage.TIME):
        lines.append(record.error)  # a wrong trial's is its count of mismatches; timed calls' say what set them apart
    for check in (record.verify, record.timed_check):
        if check and check.mismatches:
            lines.append(summarize_mismatches(check.mismatches))
    if record.failure and record.failure.log_tail:
        lines.append("Output of the failing rank(s), last lines:\n" + record.failure.log_tail[-MAX_LOG_CHARS:])
    t = record.timing
    if t is not None:
        launch = f"; host time to issue a call {_us(t.launch_s)}" if t.launch_s is not None else ""
        lines.append(f"Time per call (median of {t.bursts} bursts, {t.calls} calls back to back, each on fresh "
                     f"inputs, slowest rank, {t.clock} clock): {_us(t.time_s)} (bursts spread {t.spread:.1%}"
                     f"{launch}); reference {_us(t.reference_s)}; speedup {t.speedup:.2f}x" + _interval(record) + ".")
        if t.suspect:
            lines.append(f"Timing not believed: {t.suspect}.")
    elif record.verdict is Verdict.CORRECT and not record.performance_available:
        lines.append(f"Performance not measured: the {record.executor} executor time-slices ranks on one device.")
    r = record.roofline
    if r is not None:
        b = r.bound
        spec = f"; {r.spec_fraction:.1%} of the datasheet bound" if r.spec_fraction is not None \
            and r.datasheet is not b else ""
        bw = f"; busbw {r.busbw_gbps:.3g} GB/s, algbw {r.algbw_gbps:.3g} GB/s" if r.busbw_gbps else ""
        lines.append(f"Roofline: {r.fraction:.1%} of the {b.source} bound {_us(b.bound_s)} ({b.dominant}-bound: "
                     f"comm {_us(b.comm_s)}, compute {_us(b.compute_s)}, memory {_us(b.memory_s)}; serial sum "
                     f"{_us(b.serial_s)}){spec}{bw}.")
    notes = [record.parse.note] if record.parse and record.parse.note else []
    notes += [f.message for f in record.flags if f.severity is Severity.INFO]
    if notes:
        lines.append("Notes: " + "; ".join(notes[:5]))
    return "\n".join(lines)


def _us(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _interval(record: EvaluationRecord) -> str:
    """The speedup's 90% interval from the step's pairs, and whether it tells the code from the reference."""
    interval = record.speedup_interval
    if interval is None:
        return ""
    low, high = interval
    verdict = "" if record.distinguishable_from(1.0) else ": not distinguishable from the reference's speed"
    return f" (90% interval over {record.timing.pairs} paired bursts {low:.2f}-{high:.2f}x{verdict})"
