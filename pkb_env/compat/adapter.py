"""The adapter a rank puts around a PKB-format `solution` (trusted code of pkb_env, never the candidate's).

Built once per workload from the task's `Pkb` declaration (contract/pkb.py) and the call's sizes: each call maps
the task's arguments to PKB's positional call, calls the PKB file's `solution`, and maps what it returns back to
the task's outputs (values copied into in-place arguments, None on the ranks an `only_on` output is absent from).
Nothing here trusts the PKB file: a result of the wrong structure raises `PkbResultError`, whose message says
what PKB's problem returns, so that the failure reads as the file's, with the fix.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from pkb_env.contract import DTYPES, PkbCall
from pkb_env.contract.pkb import Arg, Computed, Harness, Listed, Pkb, Ret, Sizes
from pkb_env.contract.sparse import is_sparse
from pkb_env.ranks.outputs import tensors


class PkbResultError(TypeError):
    """A PKB file's `solution` returned what PKB's problem does not (the message says what it does)."""


def adapt(spec, solution: Callable[..., Any], sizes: Mapping[str, float], rank: int, world_size: int,
          layout) -> Callable[..., Any]:
    """`solution` (PKB's signature and outputs) as a function of the task's arguments returning the task's
    outputs. `spec` is the TaskSpec; `sizes` its size environment at the call's preset and world size."""
    pkb: Pkb = spec.pkb or Pkb(f"problem {spec.pkb_id}")
    names = spec.parameters
    returned = [o for o in spec.outputs if not o.inplace]
    declared = {o.name: o for o in spec.outputs}
    returns_dict = spec.returns == "dict"

    def call(*args: Any) -> Any:
        values = dict(zip(names, args))
        context = PkbCall(values, sizes, rank, world_size)
        pkb_args = args if pkb.params is None else tuple(_argument(p, context) for p in pkb.params)
        out = solution(*pkb_args)
        if pkb.returns is None:
            results = _as_task(out, returned, returns_dict)
        else:
            results = _returned(pkb, out, context, declared)
        for decl in returned:
            if decl.name in results and not decl.holds(rank, values, sizes, layout):
                results[decl.name] = None   # PKB returns a tensor on every rank; this task has None there
        results = _own_memory(results, (*args, *pkb_args))
        if not returned:
            return None
        missing = [d.name for d in returned if d.name not in results]
        if missing:
            raise PkbResultError(f"PKB's {pkb.name} gives no value for {missing}")   # a declaration's bug
        if returns_dict:
            return {d.name: results[d.name] for d in returned}
        if len(returned) == 1 and spec.returns != "tuple":
            return results[returned[0].name]
        return tuple(results[d.name] for d in returned)

    return call


def _own_memory(results: dict[str, Any], arguments: tuple) -> dict[str, Any]:
    """`results` with every tensor that shares memory with an argument copied. PKB's harness takes a solution's
    input back as its output (a collective's identity at world size 1: `return x.contiguous()`); pkb-env's
    contract wants new memory (an output that is a view of an input is wrong: docs/task_contract.md), so the
    adapter copies it, inside the call, where its time counts against the file."""
    held = {t.untyped_storage().data_ptr() for _, t in tensors(arguments) if t.untyped_storage().nbytes()}
    if not held:
        return results

    def own(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not is_sparse(value):   # a sparse one's parts: its own business
            return value.clone() if value.untyped_storage().data_ptr() in held else value
        if isinstance(value, (tuple, list)):
            return type(value)(own(v) for v in value)
        return value

    return {name: own(value) for name, value in results.items()}


def _argument(param, context: PkbCall) -> Any:
    if isinstance(param, Arg):
        return convert(context.values[param.source], param.to, param.name)
    if isinstance(param, Harness):
        return param.value.value(context.sizes) if isinstance(param.value, Sizes) else param.value
    if isinstance(param, Listed):
        return [context.values[name] for name in param.inputs]
    if isinstance(param, Computed):
        return param.fn(context)
    raise TypeError(f"unknown PKB parameter {param!r}")


def convert(value: Any, to: str | None, name: str) -> Any:
    """One of contract/pkb.py's conversions of an argument (or a returned value)."""
    if to is None:
        return value
    if to == "list":
        return value.tolist()
    if to == "transpose":
        return value.transpose(0, 1)
    if to == "clone":
        return value.clone()
    if to == "size":
        return torch.Size(int(v) for v in value.tolist())
    if to == "item":
        return value.item()
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, bool)) for v in value):
        return torch.tensor(value, dtype=DTYPES[to])   # PKB's older 26 returned its splits as Python lists
    if not isinstance(value, torch.Tensor):
        raise PkbResultError(f"{name}: expected a tensor, got {type(value).__name__}")
    return value.to(DTYPES[to])


def _as_task(out: Any, returned: list, returns_dict: bool) -> dict[str, Any]:
    """PKB returns what the task returns: its values by output name."""
    if not returned:
        return {}
    if returns_dict:
        if not isinstance(out, dict):
            raise PkbResultError(f"expected a dict with keys {[d.name for d in returned]} (PKB's problem returns "
                                 f"one), got {type(out).__name__}")
        return {d.name: out.get(d.name) for d in returned}
    if len(returned) == 1:
        return {returned[0].name: out}
    if not isinstance(out, (tuple, list)) or len(out) != len(returned):
        raise PkbResultError(f"expected a tuple of {len(returned)} values (PKB's problem returns "
                             f"({', '.join(d.name for d in returned)})), got {_kind(out)}")
    return {d.name: v for d, v in zip(returned, out)}


def _returned(pkb: Pkb, out: Any, context: PkbCall, declared: Mapping[str, Any]) -> dict[str, Any]:
    """PKB's returned values by the task output each maps to; in-place ones copied into their argument."""
    rets: tuple[Ret, ...] = pkb.returns
    parts = [out] if len(rets) == 1 else out
    if len(rets) > 1 and (not isinstance(out, (tuple, list)) or len(out) != len(rets)):
        raise PkbResultError(f"expected a tuple of {len(rets)} values (PKB's {pkb.name} returns "
                             f"({', '.join(r.target or 'an unchecked value' for r in rets)})), got {_kind(out)}")
    results: dict[str, Any] = {}
    for ret, value in zip(rets, parts):
        if ret.target is None:
            continue
        if ret.fn is not None:
            value = ret.fn(value, context)
        elif ret.to == "fields":
            value = _fields(value, declared[ret.target])
        else:
            value = convert(value, ret.to, ret.target)
        if declared[ret.target].inplace:
            _copy_into(context.values[ret.target], value, ret.target)
        else:
            results[ret.target] = value
    return results


def _fields(value: Any, decl) -> dict[str, Any]:
    """A 1-D tensor of PKB's metrics as the task's dict output: element i is field i, in the declared order."""
    names = [f.name for f in decl.fields]
    if not isinstance(value, torch.Tensor) or value.dim() != 1 or value.numel() != len(names):
        raise PkbResultError(f"{decl.name}: expected a 1-D tensor of {len(names)} metrics ({', '.join(names)}), "
                             f"got {_kind(value)}")
    out = {}
    for i, field in enumerate(decl.fields):
        element = value[i].clone()
        if field.kind == "scalar":
            out[field.name] = element.item()
        else:
            out[field.name] = element if field.dtype == "task" else element.to(DTYPES[field.dtype])
    return out


def _copy_into(argument: torch.Tensor, value: Any, name: str) -> None:
    """PKB returns the updated state; this task updates it in place."""
    if not isinstance(value, torch.Tensor):
        raise PkbResultError(f"{name}: expected the updated tensor, got {_kind(value)}")
    if value.shape != argument.shape:
        raise PkbResultError(f"{name}: PKB's returned value has shape {list(value.shape)}, the state it updates "
                             f"{list(argument.shape)}")
    if value.data_ptr() != argument.data_ptr() or value.stride() != argument.stride():
        argument.copy_(value)


def _kind(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return type(value).__name__
