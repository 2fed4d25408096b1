"""The suite's names, presets, dtypes and the world sizes each preset takes, as data: enough to refuse bad input
before torch is imported.

The specs import torch (their input distributions are torch code: pkb_env/contract/distributions.py), and a
command line that loaded a spec to find that a task name is misspelt paid for that import first: 1.2 s at rest,
20 s and more on a loaded machine, for an answer that needs a table. `pkb_env/suite_index_data.py` is that
table, generated from the specs (`python -m pkb_env.catalog --write`, beside docs/tasks.md) and held equal to them
by tests/tasks/test_suite_index.py. Dotted task names (packages outside the suite) and world sizes past the
table's range are not decided here: the spec decides them, as before.
"""
from __future__ import annotations

import difflib

from pkb_env.suite_index_data import TASKS, WORLD_SIZES_INDEXED

__all__ = ["TASKS", "WORLD_SIZES_INDEXED", "names", "unknown_task", "world_sizes", "describe_sizes", "problem",
           "parse_sizes", "format_sizes"]


def names() -> tuple[str, ...]:
    """Every task of the suite, in name order (what pkb_env.task.task_names() finds in tasks/)."""
    return tuple(sorted(TASKS))


def unknown_task(name: object, known: tuple[str, ...] | None = None) -> str:
    """The message for a task name the suite does not have: the closest names, and where the whole list is (the
    87 names on one line told nothing a reader could use)."""
    known = names() if known is None else known
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5) if isinstance(name, str) else []
    listed = f"`pkb-env tasks` (or pkb_env.task.task_names()) lists all {len(known)}"
    if not close:
        return f"unknown task {name!r}; no task is named like it; {listed}"
    others = f" (also close: {', '.join(close[1:])})" if len(close) > 1 else ""
    return f"unknown task {name!r}; did you mean {close[0]!r}?{others}; {listed}"


def world_sizes(task: str, preset: str) -> list[int]:
    """The world sizes among 1..WORLD_SIZES_INDEXED that `task` takes at `preset`."""
    return parse_sizes(TASKS[task]["presets"][preset][1])


def problem(task: str, preset: str | None = None, dtype: str | None = None,
            world_size: int | None = None) -> str | None:
    """Why the table says `task` cannot be judged at `preset`, `dtype` and `world_size` (each None: not asked),
    with the fix; None where it can, or where the table cannot tell (a dotted task name, a world size past its
    range: the spec decides those)."""
    if "." in str(task):
        return None
    if task not in TASKS:
        return unknown_task(task)
    entry = TASKS[task]
    if preset is not None and preset not in entry["presets"]:
        return f"task {task!r} has no preset {preset!r}; choose one of {sorted(entry['presets'])}"
    if dtype is not None and dtype not in entry["dtypes"]:
        return f"task {task!r} does not take dtype {dtype!r}; choose one of {list(entry['dtypes'])}"
    if world_size is None or preset is None or not isinstance(world_size, int) or world_size < 1 \
            or world_size > WORLD_SIZES_INDEXED:
        return None
    allowed = world_sizes(task, preset)
    if world_size in allowed:
        return None
    others = [f"{p}: {describe_sizes(world_sizes(task, p))}" for p in sorted(entry["presets"]) if p != preset]
    return (f"task {task!r} cannot run at world size {world_size} with preset {preset!r}: it takes "
            f"{describe_sizes(allowed)} there (among 1-{WORLD_SIZES_INDEXED}; {'; '.join(others)}); pick one of "
            f"those world sizes, or another preset")


def describe_sizes(sizes: list[int]) -> str:
    """[2, 4, 6, ..., 64] -> 'even sizes 2-64'; [1, ..., 64] -> '1-64'; else the list."""
    if not sizes:
        return "none"
    if len(sizes) > 2:
        step = sizes[1] - sizes[0]
        if all(b - a == step for a, b in zip(sizes, sizes[1:])):
            if step == 1:
                return f"{sizes[0]}-{sizes[-1]}"
            return f"every multiple of {step} from {sizes[0]} to {sizes[-1]}"
    return ", ".join(map(str, sizes))


def format_sizes(sizes: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3,5': the table's compact form."""
    runs: list[list[int]] = []
    for size in sizes:
        if runs and size == runs[-1][1] + 1:
            runs[-1][1] = size
        else:
            runs.append([size, size])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def parse_sizes(text: str) -> list[int]:
    """'1-3,5' -> [1, 2, 3, 5]."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out
