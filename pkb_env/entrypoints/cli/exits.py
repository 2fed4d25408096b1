"""The exit codes of `pkb-env` (part of the interface: CI jobs gate on them), and their help texts."""
from __future__ import annotations

# Exit codes of `pkb-env eval`: the worst verdict over the files judged. The verdict codes are fixed
# (scripts depend on them); 2 is argparse's own code for bad usage, kept for every usage error.
EXIT_USAGE = 2
EXIT_JUDGE_FAILURE = 7
EXIT_CODES = {"correct": 0, "wrong": 1, "runtime_error": 3, "build_error": 4, "unparsable": 5, "flagged": 6,
              "judge_error": EXIT_JUDGE_FAILURE}
EXIT_INTERRUPTED = 130   # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED = 143    # 128 + SIGTERM

EXIT_CODES_HELP = f"""exit codes (the worst verdict over the files judged):
  {EXIT_CODES['correct']}    correct        every file is correct
  {EXIT_CODES['wrong']}    wrong          it ran, but some rank's output differs from the reference
  {EXIT_USAGE}    usage error    bad arguments or config file, unknown task, missing file, world size
                      over this machine's limit (the message says which and the fix)
  {EXIT_CODES['runtime_error']}    runtime_error  a rank raised, crashed, hung or deadlocked
  {EXIT_CODES['build_error']}    build_error    importing the module or compiling its kernels failed
  {EXIT_CODES['unparsable']}    unparsable     no module defining solution(...) with the reference's parameters
  {EXIT_CODES['flagged']}    flagged        the code does something the judge does not allow
  {EXIT_JUDGE_FAILURE}    judge_error    the judge itself failed (reference, containment): not the candidate's fault
  {EXIT_INTERRUPTED}  interrupted    Ctrl-C; no process or temporary file is left behind
  {EXIT_TERMINATED}  terminated     SIGTERM; likewise"""

EVALUATE_EXIT_HELP = f"""exit codes:
  0    the report was written (whatever the scores: gate on report.json)
  {EXIT_USAGE}    usage error (bad arguments or config file, unknown task or agent, world size over the limit)
  {EXIT_JUDGE_FAILURE}    judge failure (the reference or containment failed)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C), {EXIT_TERMINATED} terminated (SIGTERM); nothing is left behind"""
