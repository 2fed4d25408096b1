"""What one call of a task yields, as the judge compares it: the paths of its outputs and their rules.

A call yields its returned structure (rooted at `output`: `output`, `output[1]`, `output['loss']`, and a dict
output's keys below it, `output['metrics']['count']`) and, for state updated in place (`InPlace`), the final
value of each such input (rooted at `updated`: `updated['exp_avg']`). Every path has one declaration and
so one check (tolerance, row order, replicas); the element-wise comparison, the timed calls' fingerprints,
the golden test and the prompt all read these paths, never their own. Paths are also what the feedback
names, so an in-place result that differs reads `updated['exp_avg']`.

Also here: the checks a declaration implies that need more than one output (an `order_by` key, a complex
output's task dtypes), and where a rank's value departs from its declaration (`problems`, `bound_problems`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Iterator, Mapping, Sequence

import torch

from pkb_env.contract.io import COMPLEX_OF, TASK_COMPLEX, Input, OnRanks, Output, Tensor
from pkb_env.contract.mesh import MeshLayout

UPDATED = "updated"
_STEP = re.compile(r"\[(\d+|'[^']*')\]")


def resolve_inplace(inputs: Sequence[Input], outputs: Sequence[Output], where: str) -> tuple[Output, ...]:
    """`outputs` with every InPlace filled in from the tensor input of its name (shape, dtype, layout)."""
    tensors = {d.name: d for d in inputs if isinstance(d, Tensor)}
    resolved = []
    for out in outputs:
        if out.inplace and out.shape is None:
            if out.name not in tensors:
                raise ValueError(f"{where}: InPlace({out.name!r}) must name a tensor input; tensor inputs: "
                                 f"{sorted(tensors)}")
            decl = tensors[out.name]
            out = replace(out, shape=decl.shape, dtype=decl.dtype, layout=decl.layout)
        resolved.append(out)
    return tuple(resolved)


def check_outputs(outputs: Sequence[Output], scalars: set[str], mesh: Sequence[str], lengths: set[str],
                  dtypes: Sequence[str], where: str) -> None:
    """What a single Output cannot check by itself (raises ValueError with the fix)."""
    returned = {o.name: o for o in outputs if not o.inplace}
    for out in outputs:
        if isinstance(out.only_on, str) and out.only_on not in scalars:
            raise ValueError(f"{where}: output {out.name} only_on={out.only_on!r} must name a Scalar input, or be "
                             f"an OnRanks(...) set")
        if isinstance(out.only_on, OnRanks):
            unknown = [n for n, _ in out.only_on.coordinates if n not in mesh]
            if unknown:
                raise ValueError(f"{where}: output {out.name} only_on names mesh dimension(s) {unknown}; the mesh "
                                 f"has {', '.join(mesh)}")
        if out.shape is not None and any(size.names & lengths for size in out.shape):
            raise ValueError(f"{where}: output {out.name}'s shape names a Length, whose value differs per call; "
                             f"declare max_shape=(...) instead (a bound; its length depends on the data)")
        if out.order_by is not None:
            key = returned.get(out.order_by)
            if key is None or key.kind != "tensor" or key.compare != "unordered" or key.only_on != out.only_on:
                raise ValueError(f"{where}: output {out.name} order_by={out.order_by!r} must name another returned "
                                 f"integer tensor output with compare='unordered' (its rows, one id per row) and "
                                 f"the same only_on")
        for decl in walk(out):
            if decl.dtype == TASK_COMPLEX and set(dtypes) - set(COMPLEX_OF):
                raise ValueError(f"{where}: output {decl.name} is complex of the task dtype, which exists for "
                                 f"{', '.join(COMPLEX_OF)} only (no complex bfloat16; complex32 is experimental): "
                                 f"take dtypes from {tuple(COMPLEX_OF)}, or declare dtype='complex64'")


def walk(out: Output) -> Iterator[Output]:
    """The output and, for a dict, every field below it."""
    yield out
    for sub in out.fields:
        yield from walk(sub)


def returns_of(outputs: Sequence[Output], returns: str) -> str:
    """How the function returns its outputs: "none", "tensor" (one value), "tuple" or "dict"."""
    count = sum(not o.inplace for o in outputs)
    if returns == "auto":
        return "none" if count == 0 else "tensor" if count == 1 else "tuple"
    return returns


def paths(outputs: Sequence[Output], returns: str) -> dict[str, Output]:
    """Every compared path and its declaration, in declaration order (returned outputs first)."""
    table: dict[str, Output] = {}
    index = 0
    for out in outputs:
        if out.inplace:
            continue
        if returns == "tensor":
            path = "output"
        elif returns == "dict":
            path = f"output[{out.name!r}]"
        else:
            path = f"output[{index}]"
        index += 1
        _add(table, path, out)
    for out in outputs:
        if out.inplace:
            table[f"{UPDATED}[{out.name!r}]"] = out
    return table


def _add(table: dict[str, Output], path: str, out: Output) -> None:
    table[path] = out
    for sub in out.fields:
        _add(table, f"{path}[{sub.name!r}]", sub)


def steps(path: str) -> list[int | str]:
    """`output[1]['loss']` -> [1, 'loss'] (the root dropped)."""
    return [int(s) if s[0] != "'" else s[1:-1] for s in _STEP.findall(path)]


def at(value: Any, path: str) -> Any:
    """The value at `path` below a call's root value, or None where the structure has no such place."""
    for step in steps(path):
        if isinstance(step, int) and isinstance(value, (tuple, list)) and step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            return None
    return value


def with_value(value: Any, path: str, new: Any) -> Any:
    """A copy of the structure `value` (containers only) with `new` at `path`, which must exist."""
    parts = steps(path)
    if not parts:
        return new
    head, rest = parts[0], "".join(f"[{s!r}]" for s in parts[1:])
    if isinstance(value, dict):
        return {**value, head: with_value(value[head], rest, new)}
    items = list(value)
    items[head] = with_value(items[head], rest, new)
    return type(value)(items) if isinstance(value, tuple) else items


def row_order(t: torch.Tensor) -> torch.Tensor:
    """The permutation that puts the rows (dim 0) of `t` in lexicographic order, stable (equal rows keep
    their order); on `t`'s device."""
    if t.dim() == 0:
        return torch.zeros(0, dtype=torch.int64, device=t.device)
    rows = t.detach().reshape(t.shape[0], -1)
    rows = rows.to(torch.int64) if rows.dtype == torch.bool else rows
    order = torch.arange(rows.shape[0], device=rows.device)
    for column in reversed(range(rows.shape[1])):  # stable sorts from the last key to the first
        order = order[torch.sort(rows[order, column], stable=True).indices]
    return order


def problems(table: Mapping[str, Output], out: Any, updated: Mapping[str, Any], rank: int, values: Mapping[str, Any],
             dtype: str, env: Mapping[str, float], layout: MeshLayout, returns: str) -> list[str]:
    """Where one rank's returned value `out` and in-place results `updated` depart from the declaration."""
    top = [d.name for p, d in table.items() if p.startswith("output[") and len(steps(p)) == 1]
    if returns == "dict" and (not isinstance(out, dict) or set(out) != set(top)):
        return [f"expected a dict with keys {top}, got {type(out).__name__}"]
    if returns == "tuple" and (not isinstance(out, (tuple, list)) or len(out) != len(top)):
        return [f"expected a tuple of {len(top)} outputs, got {type(out).__name__}"]
    if returns == "none" and out is not None:
        return [f"expected None (the results are the inputs updated in place), got {type(out).__name__}"]
    found: list[str] = []
    absent: list[str] = []
    for path, decl in table.items():
        if any(path.startswith(a + "[") for a in absent):
            continue
        value = updated.get(decl.name) if path.startswith(UPDATED) else at(out, path)
        if not decl.holds(rank, values, env, layout) or decl.kind == "none":
            if value is not None:
                found.append(f"{path}: expected None on rank {rank}")
            absent.append(path)
            continue
        found += _value_problems(path, decl, value, dtype, env, layout)
    return found


def _value_problems(path: str, decl: Output, value: Any, dtype: str, env: Mapping[str, float],
                    layout: MeshLayout) -> list[str]:
    want = decl.resolve_dtype(dtype)
    if decl.kind == "dict":
        keys = {f.name for f in decl.fields}
        if not isinstance(value, dict) or set(value) != keys:
            return [f"{path}: expected a dict with keys {sorted(keys)}, got {type(value).__name__}"]
        return []
    if decl.kind == "scalar":
        kind = bool if want == torch.bool else float if want.is_floating_point else int
        return [] if type(value) is kind else [f"{path}: expected a Python {kind.__name__}, got {type(value).__name__}"]
    if not isinstance(value, torch.Tensor):
        return [f"{path}: expected a tensor, got {type(value).__name__}"]
    found = []
    if value.dtype != want:
        found.append(f"{path}: dtype {value.dtype}, declared {want}")
    shape = decl.local_shape(env, layout)
    if shape is not None and tuple(value.shape) != shape:
        found.append(f"{path}: shape {tuple(value.shape)}, declared {shape}")
    found += bound_problem(path, decl, value, env, layout)
    return found


def bound_problem(path: str, decl: Output, value: Any, env: Mapping[str, float], layout: MeshLayout) -> list[str]:
    """A variable-length output over its declared bound (max_shape), or of another rank: the rank refuses it
    before it travels (the judge would otherwise receive whatever size the candidate chose)."""
    bound = decl.bound(env, layout)
    if bound is None or not isinstance(value, torch.Tensor):
        return []
    if value.dim() != len(bound) or any(s > b for s, b in zip(value.shape, bound)):
        return [f"{path} has shape {list(value.shape)}, beyond its declared bound {list(bound)} (max_shape "
                f"({', '.join(map(str, decl.max_shape))}))"]
    return []
