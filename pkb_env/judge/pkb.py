"""PKB-format files (JudgeConfig.pkb): which statement judges them, and the record saying so (docs/pkb_compat.md).

A PKB file (ParallelKernelBench's signature, outputs and `utils.*` helpers) is screened against PKB's signature
and called through the task's adapter (contract/pkb.py, compat/adapter.py). Which statement judges it:
- where the task declares a variant stating PKB's problem as PKB states it (tasks/<name>/pkb/: PKB's inputs,
  PKB's function as the golden, PKB's tolerance, judged with pkb-env's rigor), the variant, when it runs at
  this size; and beside it, where the task also maps PKB's call onto its own statement, the task itself, so
  that the record holds pkb-env's verdict too ("correct by PKB's statement, wrong by pkb-env's: why");
- elsewhere the task's own statement, through the mapping; a wrong verdict where pkb-env computes another
  function on purpose names the difference ("PKB's semantics differ here: ...");
- where the task maps no PKB call (`unmapped`: PKB's arguments are of another function) and has no variant,
  nothing: the record is unjudged (Verdict.JUDGE_ERROR: pkb-env's gap, not the file's), with the reason.
The record keeps the task asked for (`record.task`); `record.pkb` says which statement gave the verdict.
"""
from __future__ import annotations

from pkb_env.contract import TaskError
from pkb_env.record import EvaluationRecord, PkbJudgement, Verdict
from pkb_env.task import TaskSpec, pkb_variant, size_problem

RAN = (Verdict.BUILD_ERROR, Verdict.RUNTIME_ERROR, Verdict.WRONG, Verdict.CORRECT)   # verdicts of code that ran


def statement_of(judge, task: TaskSpec, preset: str, dtype: str) -> tuple[TaskSpec, str, str]:
    """The task whose statement judges a PKB file of `task` here, its dtype, and why the variant does not
    (empty where it does, or where there is none)."""
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
    record.task = task.name
    record.pkb = judgement
    record.feedback = "\n".join(line for line in (record.feedback, _told(judgement, record, why)) if line)
    return record


def _told(judgement: PkbJudgement, record: EvaluationRecord, why: str) -> str:
    """What the feedback adds for a PKB file: the statement that judged it, and how the others differ."""
    lines = [why] if why else []
    if judgement.statement == "pkb":
        lines.append(f"Judged as PKB states problem {judgement.pkb_id} ({judgement.problem}): PKB's inputs, function "
                     f"and tolerance, with pkb-env's checks ({judgement.judged_on}).")
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
