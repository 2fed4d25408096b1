"""The package's two kinds of failure that are nobody's verdict: the judge's own, and a machine that cannot
serve what was asked.

`JudgeError` is raised where the judge cannot give a verdict (the reference ranks died twice, a
candidate's ranks could not be started, containment that was required is missing, the clock measured
the reference faster than physics allows). The CLI exits 7 on it; a pool reports it as an
infrastructure failure. A candidate's failures are verdicts in its EvaluationRecord instead.
"""
from __future__ import annotations


class JudgeError(RuntimeError):
    """The judge itself failed: not the candidate's fault, never rewarded."""


class ExecutorError(ValueError):
    """An executor that cannot be made here (unknown name, no GPU, a world size over the machine's limit);
    the message says the fix. A usage error: the CLI exits 2 on it.

    `command_line`: the same message with its fix in the command line's words (`--executor cpu` where Python
    callers read `executor='cpu'`), which the CLI prints instead: advice fits where the user is."""

    def __init__(self, message: str, command_line: str | None = None):
        super().__init__(message)
        self.command_line = command_line or message


class PoolError(RuntimeError):
    """A Ray pool that cannot run: no cluster at the address, one too small for it, a judge that cannot start
    on its nodes (pkb_env/pool/); the message says which and the fix. A usage error: the CLI exits 2 on it."""
