"""The task suite: which tasks exist and how one is loaded. What a task IS lives in pkb_env/contract/.

A task is a folder `tasks/<name>/` with `reference.py` (shown to the agent verbatim; what the judge runs
for expected outputs and the baseline time) and `spec.py` defining `SPEC = TaskSpec(...)`. Folders whose
name starts with an underscore hold shared helpers, not tasks. docs/task_contract.md tells how to write one.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from pkb_env.contract import (DTYPES, EXACT, InputContext, Preset, TaskError, TaskSpec, Tolerance, WorldSizes,
                              derive_seed)
from pkb_env.contract.signature import reference_parameters

__all__ = ["DTYPES", "EXACT", "InputContext", "Preset", "TaskError", "TaskSpec", "Tolerance", "WorldSizes",
           "derive_seed", "task_names", "runnable_tasks", "load_task", "load_reference", "TASKS_PACKAGE"]

TASKS_PACKAGE = "pkb_env.tasks"


@lru_cache(maxsize=None)
def task_names() -> tuple[str, ...]:
    """Every task in the suite, in name order."""
    pkg = importlib.import_module(TASKS_PACKAGE)
    return tuple(sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.ispkg and not m.name.startswith("_")))


def runnable_tasks(world_size: int, preset: str) -> list[str]:
    """The tasks of the suite that take `world_size` at `preset` in the preset's dtype (what "the whole suite"
    means there; the env further leaves out what its executor cannot judge)."""
    return [n for n in task_names() if preset in load_task(n).presets
            and load_task(n).world_size_problem(world_size, preset) is None
            and load_task(n).output_problem(world_size, preset) is None]


@lru_cache(maxsize=None)
def load_task(name: str) -> TaskSpec:
    """The TaskSpec of `tasks/<name>/`, with its reference path filled in and its signature checked."""
    if not isinstance(name, str) or name not in task_names():
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(task_names())} "
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
