"""The prompt: everything a model needs for one task, as one text ready for a chat template."""
from __future__ import annotations

from pkb_env.judge.screen import reference_parameters
from pkb_env.task import TaskSpec

RULES = """Rules:
- Reply with ONE Python module in a ```python fenced block. It must define `solution` with the same
  positional parameters as the reference; it is called on every rank with that rank's inputs, after
  torch.distributed is initialised (default process group, one process per rank).
- Return new tensors with the reference's shapes and dtypes on every rank (None where the reference
  returns None). Do not modify the inputs. Do not return views of the inputs.
- Inputs are random and different on every call; outputs of timed calls are checked too, so caching,
  replaying or deferring work across calls fails.
- Not allowed: patching torch, time or the judge; reading the judge's files or environment; signalling
  other processes. Such code is rejected with the lowest reward.
- Speed is measured as the median over many barrier-aligned calls of the slowest rank's time, against
  the reference's time; the interconnect roofline fraction is reported too."""


def build_prompt(task: TaskSpec, preset: str, dtype: str, world_size: int, topology_text: str,
                 feedback: str = "", turn: int = 0, collectives_note: bool = True) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in task.preset(preset).dims.items())
    params = ", ".join(reference_parameters(task.reference_source))
    allowed = ("Calling torch.distributed collectives is allowed (a solution that only calls them scores "
               "about 1x); faster solutions move data more cleverly." if task.collectives_allowed
               else "torch.distributed collectives are NOT allowed for this task.")
    parts = [
        f"# Task: {task.title} ({task.name})",
        f"Write a faster multi-rank implementation of `solution({params})`.",
        task.description,
        f"Problem size: {dims}; dtype {dtype}; world size {world_size}.",
        f"Inputs (per rank): {task.inputs_doc}",
        f"Outputs (per rank): {task.outputs_doc}",
        f"Tolerance: {_tolerance(task, dtype)}",
        "## Reference implementation\n```python\n" + task.reference_source.rstrip() + "\n```",
        "## Hardware\n" + topology_text,
        "## " + RULES,
        allowed,
    ]
    if feedback:
        parts.append(f"## Result of your previous attempt (turn {turn})\n{feedback}\n\n"
                     "Fix the problems above or make the solution faster, and reply with the whole module again.")
    return "\n\n".join(parts) + "\n"


def _tolerance(task: TaskSpec, dtype: str) -> str:
    tol = task.tolerance(dtype)
    if tol.exact:
        return f"exact ({tol.reason})."
    return f"|got - expected| <= {tol.atol:g} + {tol.rtol:g} * |expected| ({tol.reason})."
