"""The task suite: which tasks exist and how one is loaded. What a task IS lives in pkb_env/contract/.

A task is a folder `tasks/<name>/` with `reference.py` (shown to the agent verbatim; what the judge runs
for expected outputs and the baseline time) and `spec.py` defining `SPEC = TaskSpec(...)`. Folders whose
name starts with an underscore hold shared helpers, not tasks. docs/task_contract.md tells how to write one.
"""
from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from pkb_env.contract import (DTYPES, EXACT, InputContext, Preset, TaskError, TaskSpec, Tolerance, WorldSizes,
                              derive_seed)
from pkb_env.contract.signature import reference_parameters
from pkb_env.layout import task_dirs

__all__ = ["DTYPES", "EXACT", "InputContext", "Preset", "TaskError", "TaskSpec", "Tolerance", "WorldSizes",
           "derive_seed", "task_names", "size_problem", "runnable_tasks", "load_task", "load_reference", "TASKS_PACKAGE"]

TASKS_PACKAGE = "pkb_env.tasks"


@lru_cache(maxsize=None)
def task_names() -> tuple[str, ...]:
    """Every task in the suite, in name order: tasks/ and the directories PKB_ENV_TASK_DIRS names (tests'
    contract tasks, pkb_env/layout.py), read now (`task_names.cache_clear()` after changing it)."""
    pkg = importlib.import_module(TASKS_PACKAGE)
    base = _BASE.setdefault("path", list(pkg.__path__))
    pkg.__path__[:] = [*base, *(d for d in task_dirs(os.environ) if d not in base)]
    return tuple(sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.ispkg and not m.name.startswith("_")))


_BASE: dict[str, list[str]] = {}  # the package's own folders, before any PKB_ENV_TASK_DIRS


def size_problem(task: TaskSpec, world_size: int, preset: str, dtype: str | None = None,
                 cpu_reference: bool = False) -> str | None:
    """Why `task` cannot be judged at `world_size`, `preset` and `dtype` (None: the preset's), with the fix, or
    None: the preset, the dtype, the world sizes it takes, outputs over what the judge takes from a call, and
    with `cpu_reference` (the trusted reference runs on CPU ranks: cpu, cuda-emulated) a reference too heavy
    for them."""
    if preset not in task.presets:
        return f"task {task.name!r} has no preset {preset!r}; choose one of {sorted(task.presets)}"
    if dtype is not None and dtype not in task.dtypes:
        return f"task {task.name!r} does not take dtype {dtype!r}; choose one of {list(task.dtypes)}"
    resolved = task.resolve_dtype(preset, dtype)
    return (task.world_size_problem(world_size, preset) or task.output_problem(world_size, preset, resolved)
            or (task.cpu_reference_problem(world_size, preset, resolved) if cpu_reference else None))


def runnable_tasks(world_size: int, preset: str, dtype: str | None = None, cpu_reference: bool = False) -> list[str]:
    """The tasks of the suite that can be judged at this size (`size_problem`): what "the whole suite" means
    there (JudgeService.tasks asks with its executor's `cpu_reference`)."""
    return [n for n in task_names() if size_problem(load_task(n), world_size, preset, dtype, cpu_reference) is None]


@lru_cache(maxsize=None)
def load_task(name: str) -> TaskSpec:
    """The TaskSpec of `tasks/<name>/`, with its reference path filled in and its signature checked."""
    if not isinstance(name, str) or name not in task_names():
        close = difflib.get_close_matches(name, task_names(), n=1) if isinstance(name, str) else []
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise TaskError(f"unknown task {name!r}; {hint}known tasks: {', '.join(task_names())} "
                        f"(`pkb-env tasks` lists them)")
    module = importlib.import_module(f"{TASKS_PACKAGE}.{name}.spec")
    spec: TaskSpec = module.SPEC
    if spec.name != name:
        raise TaskError(f"tasks/{name}/spec.py declares name {spec.name!r}; it must be the folder's name")
    spec = replace(spec, reference_path=Path(module.__file__).with_name("reference.py"))
    params = reference_parameters(spec.reference_source)
    if params != spec.parameters:
        raise TaskError(f"task {name!r}: reference.py's solution takes {params} but spec.py declares inputs "
                        f"{spec.parameters}; declare one input per parameter, in order")
    return spec


def load_reference(name: str) -> Callable[..., Any]:
    """The reference `solution` of a task (trusted code, imported only in judge-owned processes)."""
    return importlib.import_module(f"{TASKS_PACKAGE}.{name}.reference").solution
