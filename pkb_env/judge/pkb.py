"""PKB-format files (JudgeConfig.pkb): which statement judges them, and the record saying so (docs/pkb_compat.md).

A PKB file (ParallelKernelBench's signature, outputs and `utils.*` helpers) is screened against PKB's signature
and called through the task's adapter (contract/pkb.py, compat/adapter.py). Which statement judges it:
- where the task declares a variant stating PKB's problem as PKB states it (tasks/<name>/pkb/: PKB's inputs, or
  the task's where PKB's function is defined on them, PKB's function as the golden, PKB's tolerance, judged with
  pkb-env's rigor; the feedback says which parts are PKB's, `variant_parts`), the variant, when it runs at
  this size; and beside it, where the task also maps PKB's call onto its own statement, the task itself, so
  that the record holds pkb-env's verdict too ("correct by PKB's statement, wrong by pkb-env's: why");
- elsewhere the task's own statement, through the mapping; a wrong verdict where pkb-env computes another
  function on purpose names the difference ("PKB's semantics differ here: ...");
- where the task maps no PKB call (`unmapped`: PKB's arguments are of another function), the variant alone, the
  record saying why no pkb-env verdict stands beside it; without a variant (or where it cannot run at this size),
  nothing: the record is unjudged (Verdict.JUDGE_ERROR: pkb-env's gap, not the file's), with the reason.
The record keeps the task asked for (`record.task`); `record.pkb` says which statement gave the verdict.
"""
from __future__ import annotations

from pkb_env.contract import TaskError
from pkb_env.record import EvaluationRecord, PkbJudgement, Verdict
from pkb_env.task import TaskSpec, pkb_variant, size_problem

RAN = (Verdict.BUILD_ERROR, Verdict.RUNTIME_ERROR, Verdict.WRONG, Verdict.CORRECT)   # verdicts of code that ran


def statement_of(judge, task: TaskSpec, preset: str, dtype: str) -> tuple[TaskSpec, str, str]:
    """The task whose statement judges a PKB file of `task` here, its dtype, and what the feedback must add: why
    the variant does not judge it, or why it judges in another dtype than asked (empty otherwise)."""
    try:
        variant = pkb_variant(task)
    except TaskError as exc:   # a variant that does not load is the judge's bug: say so, judge the task
        return task, dtype, f"PKB's statement of this problem could not be loaded ({exc})"
    if variant is None:
        return task, dtype, ""
    vdtype = dtype if dtype in variant.dtypes else variant.presets[preset].dtype if preset in variant.presets else dtype
    problem = size_problem(variant, judge.executor.world_size, preset, vdtype,
                           judge.executor.reference_placement.on_cpu)
    if problem:
        return task, dtype, f"PKB's statement of this problem cannot run here ({problem}); judged on pkb-env's"
    if vdtype != dtype:   # a file written for the dtype asked may refuse this one: its verdict must say why
        return variant, vdtype, (f"PKB's statement of this problem takes {', '.join(variant.dtypes)} only "
                                 f"(docs/pkb_compat.md says why): judged in {vdtype}, not the {dtype} asked.")
    return variant, vdtype, ""


def evaluate(judge, task: TaskSpec, action: object, preset: str, dtype: str) -> EvaluationRecord:
    """Judge a PKB-format file of `task` (the module docstring)."""
    chosen, vdtype, why = statement_of(judge, task, preset, dtype)
    if chosen is task and task.pkb is not None and task.pkb.unmapped:
        return no_statement(judge, task, action, preset, dtype, why)
    record = judge.statement(chosen, action, preset, vdtype, pkb=True)
    own = None
    if chosen is not task and record.verdict in RAN and (task.pkb is None or not task.pkb.unmapped):
        own = judge.statement(task, action, preset, dtype, pkb=True)
    return finish(record, task, chosen, own, why)


def screen(judge, task: TaskSpec, action: object, preset: str, dtype: str) -> EvaluationRecord | None:
    """Parse and screen a PKB-format file against the signature of the statement that would judge it."""
    chosen, vdtype, why = statement_of(judge, task, preset, dtype)
    if chosen is task and task.pkb is not None and task.pkb.unmapped:
        return no_statement(judge, task, action, preset, dtype, why)
    record = judge.screened(chosen, action, preset, vdtype, pkb=True)
    return None if record is None else finish(record, task, chosen, None, why)


def no_statement(judge, task: TaskSpec, action: object, preset: str, dtype: str, why: str) -> EvaluationRecord:
    """A PKB file of a task that maps no PKB call onto its own statement and has no variant (PKB's function is
    another one): nothing can judge it, which is pkb-env's gap, not the file's, and nothing of it runs (it would
    meet the arguments of another function and fail with a message about them). It is parsed and screened first:
    what the screen refuses (NVLink multicast, an exploit, a module that does not parse) is the file's."""
    screened = judge.screened(task, action, preset, dtype, pkb=True)
    if screened is not None:
        return finish(screened, task, task, None, why)
    pkb = task.pkb
    error = (f"pkb-env has no statement of PKB problem {task.pkb_id} ({pkb.name}) that can judge a PKB-format file: "
             f"{pkb.unmapped}; PKB's semantics differ here: {pkb.differs}" + (f" ({why})" if why else ""))
    info = judge.executor.info
    record = EvaluationRecord.unjudged(task.name, judge.executor.world_size, preset, dtype, info.name, info.hardware,
                                       error)
    record.pkb = PkbJudgement(pkb_id=task.pkb_id, problem=pkb.name, statement="none", judged_on="",
                              differs=pkb.differs)
    record.feedback = f"NOT JUDGED: {error}. It earns no reward; the file was not run."
    return record


def finish(record: EvaluationRecord, task: TaskSpec, chosen: TaskSpec, own: EvaluationRecord | None,
           why: str) -> EvaluationRecord:
    """`record.pkb` filled in, the task asked for kept as the record's, the feedback told which statement."""
    pkb = task.pkb
    name = pkb.name if pkb else f"problem {task.pkb_id}"
    judgement = PkbJudgement(pkb_id=task.pkb_id, problem=name, statement="pkb" if chosen is not task else "pkb-env",
                             judged_on=chosen.name, differs=pkb.differs if pkb else "",
                             pkb_rule=record.verify.pkb_rule if record.verify else None)
    if own is not None:
        judgement.pkb_env_verdict = own.verdict.value
        judgement.pkb_env_error = own.error
        if own.verdict is not record.verdict:
            judgement.note = (f"{record.verdict.value} by PKB's statement, {own.verdict.value} by pkb-env's"
                              + (f": {own.error}" if own.error else "")
                              + (f" (PKB's semantics differ here: {judgement.differs})" if judgement.differs else ""))
    elif chosen is not task and pkb is not None and pkb.unmapped and record.verdict in RAN:
        judgement.note = (f"pkb-env's statement cannot judge it ({pkb.unmapped}): PKB's semantics differ here: "
                          f"{judgement.differs}")
    record.task = task.name
    record.pkb = judgement
    parts = variant_parts(task, chosen) if chosen is not task else ""
    record.feedback = "\n".join(line for line in (record.feedback, _told(judgement, record, why, parts)) if line)
    return record


def variant_parts(task: TaskSpec, variant: TaskSpec) -> str:
    """What a variant takes from PKB and what it keeps of the task, read off the two declarations: the inputs (the
    variant's drawn otherwise, or the task's, with its edge cases or naming those it drops: `in_inputs_dtype` keeps
    them, `without_ties` drops them), the function (the variant's golden, or the task's where PKB's function is the task's
    on the variant's inputs) and the tolerance."""
    pkb, kept = [], []
    (kept if variant.golden is task.golden else pkb).append("function")
    (kept if variant.tolerance_rule == task.tolerance_rule else pkb).append("tolerance")
    dropped = [edge.name for edge in task.edges if edge not in variant.edges]
    if variant.inputs != task.inputs:
        pkb.insert(0, "inputs")
    elif dropped:
        kept.append(f"inputs without its edge case{'s' if len(dropped) > 1 else ''} {', '.join(dropped)}")
    else:
        kept.append("inputs and edge cases" if task.edges else "inputs")
    return "; ".join(f"{whose} {_listed(parts)}" for whose, parts in (("PKB's", pkb), ("the task's", kept)) if parts)


def _listed(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _told(judgement: PkbJudgement, record: EvaluationRecord, why: str, parts: str) -> str:
    """What the feedback adds for a PKB file: the statement that judged it (`parts`: what a variant takes from PKB
    and from the task), and how the others differ."""
    lines = [why] if why else []
    if judgement.statement == "pkb":
        lines.append(f"Judged as PKB states problem {judgement.pkb_id} ({judgement.problem}): {parts}, with "
                     f"pkb-env's checks ({judgement.judged_on}).")
    else:
        lines.append(f"Judged on pkb-env's statement of PKB problem {judgement.pkb_id} ({judgement.problem}), "
                     f"PKB's call and outputs mapped onto it.")
        if judgement.differs and record.verdict is Verdict.WRONG:
            lines.append(f"PKB's semantics differ here: {judgement.differs}")
    if judgement.note:
        lines.append(f"Beside it: {judgement.note}")
    if judgement.pkb_rule is not None and judgement.pkb_rule != (record.verdict is Verdict.CORRECT):
        lines.append("PKB's own check (allclose at 1e-2 on the trials' outputs) would "
                     + ("pass" if judgement.pkb_rule else "fail") + " them.")
    return "\n".join(lines)
