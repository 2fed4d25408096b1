"""Replicas that must agree bit for bit (`Output(identical=True)`): the ranks' own values, compared among them.

Each rank's output is compared with the reference's at the tolerance; two ranks can each be within it and
still differ from each other, which a data-parallel job cannot afford (replicas of the parameters drift
apart, step after step). Where the task says so, every rank holding the same block (by the output's layout:
all ranks for Replicated) must return the same bits as the first rank of its block, in the trials (the
values) and in every timed call (the fingerprints: the same seed on every rank and the same code over the
same bits give the same fingerprint, so a difference in any of them is a difference in the values).
"""
from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np
import torch

from pkb_env.contract import results
from pkb_env.contract.spec import TaskSpec
from pkb_env.judge.fingerprints import timed_label
from pkb_env.record import Mismatch

_FINGERPRINT_PARTS = ("e", "p", "a", "x")


def replica_groups(task: TaskSpec, world_size: int, dims: dict[str, int]) -> dict[str, list[list[int]]]:
    """Per path of an `identical` output: the groups of ranks that hold the same block (two or more), on the
    mesh the preset's `dims` size."""
    layout = task.layout(world_size, dims)
    groups: dict[str, list[list[int]]] = {}
    for path, decl in task.output_paths.items():
        if not decl.identical:
            continue
        by_key: dict[str, list[int]] = {}
        for rank in range(world_size):
            by_key.setdefault(layout.scope_key(decl.layout.scope(layout), rank), []).append(rank)
        groups[path] = [ranks for ranks in by_key.values() if len(ranks) > 1]
    return groups


def trial_mismatches(groups: dict[str, list[list[int]]], outputs: Sequence[Any], updated: Sequence[Any],
                     trial: str) -> list[Mismatch]:
    """Ranks whose value at an identical path differs, bit for bit, from the first rank of their block."""
    found = []
    for path, blocks in groups.items():
        values = updated if path.startswith(results.UPDATED) else outputs
        for ranks in blocks:
            first = results.at(values[ranks[0]], path)
            for rank in ranks[1:]:
                value = results.at(values[rank], path)
                if first is not None and value is not None and not same_bits(first, value):
                    found.append(Mismatch(trial, rank, path, f"differs bit for bit from rank {ranks[0]}'s "
                                          f"{path}: the task requires every replica to be identical (compute it "
                                          f"once and broadcast, or in the same order on every rank)"))
    return found


def same_bits(a: Any, b: Any) -> bool:
    """Whether two exported values are the same bits (tensors: dtype, shape and every byte; floats: their
    IEEE representation, so -0.0 differs from 0.0 and NaNs of different payloads differ)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(_bytes(a), _bytes(b))
    if type(a) is float and type(b) is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    return type(a) is type(b) and a == b


def _bytes(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)


def timed_mismatches(groups: dict[str, list[list[int]]], arguments: dict[str, str], payloads: Sequence[dict],
                     burst: int) -> list[Mismatch]:
    """The same over every timed call of a burst, from each rank's fingerprints (`payloads`, per rank, already
    checked for their form by compare_burst). `arguments`: in-place results' paths by the argument path the
    ranks fingerprint them under (TaskSpec.inplace_arguments)."""
    by_result = {v: k for k, v in arguments.items()}
    found = []
    for path, blocks in groups.items():
        part, name = ("inputs", by_result[path]) if path.startswith(results.UPDATED) else ("outputs", path)
        rows = [_rows(payload[part], name) for payload in payloads]
        for ranks in blocks:
            for rank in ranks[1:]:
                for call, theirs in rows[rank].items():
                    ours = rows[ranks[0]].get(call)
                    if ours is not None and not _equal(ours, theirs):
                        found.append(Mismatch(timed_label(burst, call), rank, path,
                                              f"differs from rank {ranks[0]}'s {path} (fingerprints of every timed "
                                              f"call): the task requires every replica to be bit-identical"))
                        break  # one call per rank and path is enough to say so
    return found


def _rows(part: dict, path: str) -> dict[int, list[np.ndarray]]:
    """Per call: the fingerprint arrays of the tensor at `path` (none where the call has no such tensor)."""
    rows: dict[int, list[np.ndarray]] = {}
    for group in part["groups"]:
        if group["path"] != path:
            continue
        for row, call in enumerate(group["calls"].tolist()):
            rows[call] = [group[k].numpy()[row] for k in _FINGERPRINT_PARTS if k in group and k != "t2"]
    return rows


def _equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))
