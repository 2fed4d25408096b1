"""The feedback text: what the agent reads after a step, short and specific enough to act on."""
from __future__ import annotations

from pkb_env.config import STATISTIC_WORDS
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


# What a WRONG step's headline says, by what its mismatches found (Mismatch.kind): the headline must say what the
# details say (an input-mutating candidate read "outputs differ" above "the call modified argument[0]").
WRONG_BECAUSE = {
    "value": "outputs differ from the reference",
    "permuted": "the outputs hold the right values in the wrong order",
    "untouched": "state the task updates in place was left as given",
    "view": "an output is a view of an input, not a new tensor",
    "mutated": "the call modified its inputs",
}


def headline(record: EvaluationRecord) -> str:
    """The first line of the feedback: the verdict and, for a wrong one, what was wrong, in the details' words."""
    if record.verdict is not Verdict.WRONG:
        return HEADLINES.get(record.verdict, "NOT JUDGED: the judge stopped before a verdict.")
    kinds = [m.kind for check in (record.verify, record.timed_check) if check for m in check.mismatches]
    found = [WRONG_BECAUSE[k] for k in WRONG_BECAUSE if k in kinds]
    if not found:
        return HEADLINES[Verdict.WRONG]
    return "WRONG: " + "; ".join(found) + "."


def write_feedback(record: EvaluationRecord) -> str:
    lines = [headline(record)]
    if record.error and (record.verdict is not Verdict.WRONG or record.stage is Stage.TIME):
        lines.append(record.error)  # a wrong trial's is its count of mismatches; timed calls' say what set them apart
    for check in (record.verify, record.timed_check):
        if check and check.mismatches:
            lines.append(summarize_mismatches(check.mismatches))
    if record.failure and record.failure.log_tail:
        lines.append("Output of the failing rank(s), last lines:\n" + record.failure.log_tail[-MAX_LOG_CHARS:])
    t = record.timing
    if t is not None:
        lines.append(f"Time per call: {duration(t.time_s)} ({STATISTIC_WORDS.get(t.statistic, t.statistic)}; "
                     f"{t.bursts} bursts, {t.calls} calls back to back, each on fresh inputs, {t.clock} clock; bursts "
                     f"spread {t.spread:.1%}{_host(t)}); reference {duration(t.reference_s)}; speedup "
                     f"{t.speedup:.2f}x" + _interval(record) + ".")
        if t.suspect:
            lines.append(f"Timing not believed: {t.suspect}.")
    elif record.verdict is Verdict.CORRECT and not record.performance_available:
        lines.append(f"Performance not measured: {record.unmeasured}.")
    r = record.roofline
    if r is not None:
        b = r.bound
        spec = f"; {r.spec_fraction:.1%} of the datasheet bound" if r.spec_fraction is not None \
            and r.datasheet is not b else ""
        bw = f"; busbw {r.busbw_gbps:.3g} GB/s, algbw {r.algbw_gbps:.3g} GB/s" if r.busbw_gbps else ""
        lines.append(f"Roofline: {r.fraction:.1%} of the {b.source} bound {duration(b.bound_s)} ({b.dominant}-bound: "
                     f"comm {duration(b.comm_s)}, compute {duration(b.compute_s)}, memory {duration(b.memory_s)}; "
                     f"serial sum {duration(b.serial_s)}){spec}{bw}.")
    notes = [record.parse.note] if record.parse and record.parse.note else []
    notes += [f.message for f in record.flags if f.severity is Severity.INFO]
    if notes:
        lines.append("Notes: " + "; ".join(notes[:5]))
    return "\n".join(lines)


def _host(t) -> str:
    """The host's time per call, said with what it means on this clock: a host time above the time per call read
    as a contradiction ("host time to issue a call 3.103 ms" beside a 1.001 ms call on CPU ranks)."""
    if t.launch_s is None:
        return ""
    if t.clock == "host":   # CPU ranks: the host does the work; the figure is a burst's fastest interval
        return (f"; the host's time per call over whole bursts {duration(t.launch_s)}, scheduling stalls included, "
                f"which the fastest interval leaves out")
    return (f"; host time to issue a call {duration(t.launch_s)}, what a CUDA graph would save"
            + (": above the time per call, so the host limits your speed" if t.launch_s > t.time_s else ""))


def duration(seconds: float | None) -> str:
    """A time as the feedback and the stage table print it: ms from a millisecond on, else us."""
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
