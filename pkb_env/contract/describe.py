"""Text generated from a task's declarations: the prompt's problem, input, output and cost sections.

Nothing here is written per task: every line comes from the TaskSpec, so the prompt can never disagree
with what the judge makes, compares and bounds.
"""
from __future__ import annotations

from pkb_env.contract.cost import Peaks, bound, describe_bound, describe_model
from pkb_env.contract.edges import announce
from pkb_env.contract.expr import show
from pkb_env.contract.io import (TASK_DTYPE, Const, Group, OnRanks, Output, Replicated, Scalar, Sharded, Tensor,
                                 resolve_dtype, show_shape)
from pkb_env.contract.results import UPDATED, steps
from pkb_env.contract.spec import TaskSpec


def problem_lines(task: TaskSpec, preset: str, dtype: str, world_size: int) -> list[str]:
    dims = task.preset(preset).dims
    layout = task.layout(world_size, dims)
    sizes = ", ".join(f"{k}={v}" for k, v in dims.items())
    mesh = "" if layout.names == ("world",) else f"; mesh {layout.describe()}"
    env = task.env(dims, world_size)
    return ([f"Sizes: {sizes}; dtype {dtype}; world size W={world_size}{mesh}."]
            + [f"Length {length.describe(env, layout)}." for length in task.lengths]
            + [f"The {routing.describe(env, layout)}." for routing in task.routings])


def input_lines(task: TaskSpec, preset: str, dtype: str, world_size: int) -> list[str]:
    """One line per positional argument, in order."""
    dims = task.preset(preset).dims
    layout = task.layout(world_size, dims)
    env, longest = task.env(dims, world_size), task.env(dims, world_size, lengths="high")
    lines = []
    for decl in task.inputs:
        doc = f" -- {decl.doc}" if decl.doc else ""
        if isinstance(decl, Tensor):
            shape = show_shape(decl.shape, decl.layout, layout)
            local = _sizes(decl.local_shape(env, layout), decl.local_shape(longest, layout))
            full = "" if not isinstance(decl.layout, Sharded) else \
                f" (global {show_shape(decl.shape, Replicated(), layout)})"
            stored = "" if decl.sparse is None else \
                f" {decl.sparse.describe()} = {decl.sparse.count(decl.local_shape(env, layout), env)} stored entries"
            where = "" if decl.sparse is None else " at distinct positions drawn uniformly, values"
            lines.append(f"- {decl.name}: {_dtype(decl.dtype, dtype)}{stored} {shape} = {local}{full};{where} "
                         f"{decl.dist.describe()}; {decl.layout.describe(layout)}{doc}")
        elif isinstance(decl, Scalar):
            lines.append(f"- {decl.name}: Python number, {decl.dist.describe()}, drawn per call; "
                         f"{decl.layout.describe(layout)}{doc}")
        elif isinstance(decl, Const):
            value = decl.resolve(env, dtype)
            source = f" (= {decl.dim})" if decl.dim is not None else " (the task dtype)" if decl.task_dtype else ""
            lines.append(f"- {decl.name}: {value!r}{source}, fixed{doc}")
        elif isinstance(decl, Group):
            size = layout.group_size(decl.dim)
            span = decl.dim if isinstance(decl.dim, str) else " x ".join(decl.dim)
            lines.append(f"- {decl.name}: this rank's process group along {span} ({size} rank"
                         f"{'s' if size != 1 else ''}), built by the judge before the call{doc}")
    if task.edges:   # the statement's edge cases, which the sizes and distributions above do not show
        cases = "; ".join(announce(edge) for edge in task.edges)
        lines.append(f"Edge cases of the statement, drawn beside the values above (the trials of every step include "
                     f"each, and one timed call in two is one of them): {cases}.")
    return lines


def output_lines(task: TaskSpec, preset: str, dtype: str, world_size: int) -> list[str]:
    """One line per compared path: what the call returns (and a dict's keys below it), then the inputs it
    updates in place."""
    dims = task.preset(preset).dims
    layout = task.layout(world_size, dims)
    env, longest = task.env(dims, world_size), task.env(dims, world_size, lengths="high")
    lines = []
    for path, out in task.output_paths.items():
        indent = "  " * (len(steps(path)) - 1 if path.startswith("output[") else 0)
        doc = f" -- {out.doc}" if out.doc else ""
        name = f" ({out.name})" if path.startswith("output") else ""
        lead = f"{indent}- {path}{name}"
        if path.startswith(UPDATED):
            lines.append(f"{lead}: input {out.name} updated in place (the input's own tensor, left holding the "
                         f"result); {_rule(task, out, dtype, dims, world_size)}{_identical(out)}{doc}")
            continue
        where = "" if indent else "; " + (out.only_on.describe() if isinstance(out.only_on, OnRanks) else
                                          f"on rank {out.only_on} only, None on the others" if out.only_on else
                                          out.layout.describe(layout))
        if out.kind == "none":
            lines.append(f"{lead}: always None{doc}")
        elif out.kind == "dict":
            lines.append(f"{lead}: a dict with exactly the keys {[f.name for f in out.fields]}{where}{doc}")
        elif out.kind == "scalar":
            kind = _python_type(out, dtype)
            lines.append(f"{lead}: a Python {kind} (not a tensor){where}; {_rule(task, out, dtype, dims, world_size)}"
                         f"{_identical(out)}{doc}")
        else:
            lines.append(f"{lead}: {_out_dtype(out, dtype)} {_shape(out, env, longest, layout)}{where}; "
                         f"{_rule(task, out, dtype, dims, world_size)}{_identical(out)}{doc}")
    return lines


def _shape(out: Output, env, longest, layout) -> str:
    if out.shape is None:
        bound = ", ".join(show(s) for s in out.max_shape)
        return (f"of variable length, at most ({bound}) = {tuple(out.bound(longest, layout))} "
                f"(its sizes depend on the data; a rank refuses a larger one)")
    shape = f"{show_shape(out.shape, out.layout, layout)} = {tuple(out.local_shape(env, layout))}"
    if isinstance(out.layout, Sharded):
        shape += f" (global {show_shape(out.shape, Replicated(), layout)})"
    return shape


def _rule(task: TaskSpec, out: Output, dtype: str, dims, world_size: int) -> str:
    tol = task.tolerance(dtype, dims, world_size, out)
    ties = f"; ties: {out.ties}" if out.ties else ""
    if out.compare == "unordered":
        return f"rows compared as a set (any order), exactly{ties}"
    order = f"rows in any order: both sides' rows put in the order of their own {out.order_by}, then " \
        if out.order_by else ""
    if tol.exact or not _is_float(out, dtype):
        return f"{order}compared bit-exact{ties}"
    parts = " on real and imaginary parts" if out.resolve_dtype(dtype).is_complex else ""
    return f"{order}|got - expected| <= {tol.atol:.3g} + {tol.rtol:.3g} * |expected|{parts}{ties}"


def _identical(out: Output) -> str:
    return "; every rank holding the same block returns the same bits" if out.identical else ""


def _python_type(out: Output, dtype: str) -> str:
    torch_dtype = out.resolve_dtype(dtype)
    return "bool" if str(torch_dtype) == "torch.bool" else "float" if torch_dtype.is_floating_point else "int"


def tolerance_lines(task: TaskSpec, preset: str, dtype: str, world_size: int) -> list[str]:
    dims = task.preset(preset).dims
    outputs_by_reason: dict[str, list[str]] = {}
    for out in task.output_paths.values():
        if out.kind in ("tensor", "scalar") and out.compare == "close" and _is_float(out, dtype):
            reason = task.tolerance(dtype, dims, world_size, out).reason
            outputs_by_reason.setdefault(reason, []).append(out.name)
    several = len(outputs_by_reason) > 1  # then each line names the outputs it applies to
    lines = [f"Tolerance{' of ' + ', '.join(names) if several else ''}: {reason}."
             for reason, names in outputs_by_reason.items()]
    return lines + ["Integer and boolean outputs are compared exactly. NaN where the reference has NaN, else "
                    "NaN or Inf is wrong. Dtypes and shapes must match exactly."]


def cost_lines(task: TaskSpec, preset: str, dtype: str, world_size: int, peaks: Peaks | None) -> list[str]:
    model = task.cost_model(task.preset(preset).dims, world_size, dtype)
    lines = [f"- {line}" for line in describe_model(model)] or ["- nothing to move, compute or read"]
    if peaks is not None:
        lines.append("At " + describe_bound(bound(model, peaks)) + ".")
    else:
        lines.append("No peaks are known for this machine yet (`pkb-env calibrate` measures them).")
    return lines


def _sizes(smallest: tuple[int, ...], largest: tuple[int, ...]) -> str:
    """A local shape as text; a dim sized by a Length shows its range: (6..10, 8)."""
    parts = [str(a) if a == b else f"{a}..{b}" for a, b in zip(smallest, largest)]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _dtype(name: str, task_dtype: str) -> str:
    return str(resolve_dtype(name, task_dtype)).removeprefix("torch.") if name != TASK_DTYPE else task_dtype


def _out_dtype(out: Output, task_dtype: str) -> str:
    return task_dtype if out.dtype == TASK_DTYPE else str(out.resolve_dtype(task_dtype)).removeprefix("torch.")


def _is_float(out: Output, task_dtype: str) -> bool:
    dtype = out.resolve_dtype(task_dtype)
    return dtype.is_floating_point or dtype.is_complex
