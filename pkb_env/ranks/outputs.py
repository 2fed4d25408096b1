"""What a rank hands back for a call, and the checks on it that need the rank's own memory.

Outputs may be tensors, None, Python scalars, or tuples/lists/dicts of them (the task contract). Plain
tensors only: a subclass or a lazy object could compute (or change) its value when the judge looks.
`skeleton` describes an output's structure without its data (what the judge compares exactly);
`export` copies it to the CPU; `stage` copies it on the device in stream order (a snapshot of the
values as they are right after the call). `reuse_problems` and `aliases` find outputs that are not
new memory: a view of an input, or memory an earlier call already returned (a cache, a replay, a
buffer the next call overwrites while the caller still holds the result).
"""
from __future__ import annotations

import sys
from typing import Any, Iterator

import torch
import torch.distributed as dist

from pkb_env.contract.sparse import is_sparse, parts
from pkb_env.contract.spec import MAX_OUTPUT_BYTES
from pkb_env.ranks.tripwire import JUDGE, watch


class OutputError(TypeError):
    """The solution returned something the judge cannot accept as an output."""


def tensors(obj: Any, path: str = "output") -> Iterator[tuple[str, torch.Tensor]]:
    """Every dense tensor in `obj` with its path; a sparse tensor (a contract v3 input) is its stored parts,
    so cloning, mutation checks, aliasing and byte counts see its indices and values."""
    if isinstance(obj, torch.Tensor):
        yield from parts(obj, path)
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from tensors(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors(v, f"{path}[{k!r}]")


def nbytes(obj: Any) -> int:
    return sum(t.numel() * t.element_size() for _, t in tensors(obj))


def skeleton(obj: Any, path: str = "output", strict: bool = True) -> Any:
    """The structure of an output without tensor data: nested lists of str/int/float/None, JSON-like.

    `strict`: refuse what an output may not be (OutputError); otherwise (inputs, which may hold process
    groups) other objects are described by their type's name.
    """
    kind = type(obj)
    if obj is None:
        return None
    if kind in (bool, int, float, str):
        return [kind.__name__, obj]
    if kind is complex:
        return ["complex", obj.real, obj.imag]
    if isinstance(obj, torch.Tensor):
        if kind is not torch.Tensor:
            raise OutputError(f"{path} is a {kind.__name__} (a tensor subclass); return a plain torch.Tensor")
        if not strict and is_sparse(obj):  # a sparse input (contract v3); `tensors` gives its parts
            return ["sparse", str(obj.layout).removeprefix("torch."), str(obj.dtype).removeprefix("torch."),
                    list(obj.shape)]
        if obj.is_nested or obj.layout != torch.strided or obj.device.type == "meta":
            raise OutputError(f"{path} is not a dense tensor with data; return a materialised strided tensor")
        return ["tensor", str(obj.dtype).removeprefix("torch."), list(obj.shape)]
    if kind in (tuple, list, torch.Size):
        return ["sequence", [skeleton(v, f"{path}[{i}]", strict) for i, v in enumerate(obj)]]
    if kind is dict and all(type(k) is str for k in obj):
        return ["dict", {k: skeleton(v, f"{path}[{k!r}]", strict) for k, v in obj.items()}]
    if not strict:
        # A process group by what it is, not by its class: a candidate's group (ranks/host_staged.py) and the
        # reference's (NCCL's, on GPUs) are the same argument to the call.
        return ["object", "ProcessGroup" if isinstance(obj, dist.ProcessGroup) else kind.__name__]
    if kind is dict:
        raise OutputError(f"{path} is a dict with non-string keys")
    raise OutputError(f"{path} is a {kind.__name__}; outputs must be tensors, None, numbers, "
                      f"or tuples/lists/dicts of them")


def export(obj: Any, path: str = "output") -> Any:
    """A detached CPU copy of an output, admitting only plain tensors, None, scalars and containers."""
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, torch.Tensor):
        skeleton(obj, path)
        return JUDGE.to(JUDGE.detach(obj), "cpu", copy=True)
    if type(obj) in (tuple, list, torch.Size):
        items = [export(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        return list(items) if type(obj) is list else tuple(items)
    if type(obj) is dict:
        if not all(isinstance(k, str) for k in obj):
            raise OutputError(f"{path} is a dict with non-string keys")
        return {k: export(v, f"{path}[{k!r}]") for k, v in obj.items()}
    raise OutputError(f"{path} is a {type(obj).__name__}; outputs must be tensors, None, numbers, "
                      f"or tuples/lists/dicts of them")


def check_size(obj: Any, limit: int = MAX_OUTPUT_BYTES) -> None:
    """Refuse outputs too large to be any task's answer before copying them anywhere."""
    size = nbytes(obj)
    if size > limit:
        raise OutputError(f"the output holds {size / 2**20:.0f} MiB; the judge accepts at most "
                          f"{limit / 2**20:.0f} MiB per call (check the output's shape)")


def stage(obj: Any) -> Any:
    """Device-side copies of every tensor in an output, ordered on the current stream (no host sync)."""
    if isinstance(obj, torch.Tensor) and type(obj) is torch.Tensor:
        return JUDGE.clone(JUDGE.detach(obj))
    if type(obj) in (tuple, list):
        return type(obj)(stage(v) for v in obj)
    if type(obj) is dict:
        return {k: stage(v) for k, v in obj.items()}
    return obj  # skeleton()/export() reject what is not allowed, with the path


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def aliases(out: Any, args: tuple) -> list[str]:
    """Output paths whose storage is an input's storage (a view of an input is not a result)."""
    storages = {_storage(t) for _, t in tensors(args, "arg") if t.numel()}
    return [p for p, t in tensors(out) if t.numel() and _storage(t) in storages]


def shared_with(out: Any, earlier: list[Any]) -> list[int]:
    """Indices of `earlier` outputs (all still alive) whose memory `out` shares: a buffer returned again."""
    mine = {_storage(t) for _, t in tensors(out) if t.numel()}
    return [i for i, e in enumerate(earlier) if mine & {_storage(t) for _, t in tensors(e) if t.numel()}]


def reuse_problems(outputs: list[Any], inputs: list[tuple]) -> list[tuple[int, str]]:
    """(call, message) for outputs that alias their inputs or memory an earlier call of the burst returned.

    All outputs of a burst are alive while this runs (the judge holds them), so no allocator can have
    handed the same memory out twice: shared storage means the candidate returned it twice.
    """
    problems: list[tuple[int, str]] = []
    owner: dict[int, int] = {}
    for call, (out, args) in enumerate(zip(outputs, inputs)):
        for path in aliases(out, args):
            problems.append((call, f"{path} is a view of an input argument; return a new tensor"))
        mine = {_storage(t) for _, t in tensors(out) if t.numel()}
        for storage in mine:
            earlier = owner.get(storage)
            if earlier is not None and earlier != call:
                problems.append((call, f"the output shares memory with the output of call {earlier} of the same "
                                       f"burst; return new memory every call (a caller keeps earlier results)"))
                break
        for storage in mine:
            owner.setdefault(storage, call)
    return problems


def clone_args(args: tuple) -> list[tuple[str, torch.Tensor]]:
    return [(p, JUDGE.clone(JUDGE.detach(t))) for p, t in tensors(args, "argument")]


def mutated(args: tuple, pristine: list[tuple[str, torch.Tensor]], inplace: tuple[int, ...] = ()) -> list[str]:
    """Argument paths the call changed, but for the arguments the task updates in place (`inplace`: their
    positions), whose final values are compared as results instead."""
    current = dict(tensors(args, "argument"))
    return [p for p, before in pristine if not any(p == f"argument[{i}]" or p.startswith(f"argument[{i}][")
                                                   for i in inplace)
            and (current[p].shape != before.shape or not JUDGE.equal(JUDGE.detach(current[p]), before))]


def unchanged(args: tuple, pristine: list[tuple[str, torch.Tensor]], inplace: tuple[int, ...]) -> list[str]:
    """The arguments the task updates in place (`inplace`: their positions) that the call left as they were: what
    lets the judge say "it still holds its input value" instead of listing elements that differ."""
    current = dict(tensors(args, "argument"))
    return [f"argument[{i}]" for i in inplace
            if all(current[p].shape == before.shape and JUDGE.equal(JUDGE.detach(current[p]), before)
                   for p, before in pristine if p == f"argument[{i}]" or p.startswith(f"argument[{i}]["))
            and any(p == f"argument[{i}]" or p.startswith(f"argument[{i}][") for p, _ in pristine)]


def updated(args: tuple, inplace: dict[str, int]) -> dict[str, Any]:
    """The in-place results of a call ({input name: its argument}), copied in stream order (`stage`)."""
    return {name: stage(args[index]) for name, index in inplace.items()}


watch(sys.modules[__name__], "skeleton", "export", "check_size", "stage", "aliases", "reuse_problems", "clone_args",
      "mutated", "unchanged", "updated", "tensors", "nbytes", "shared_with")
