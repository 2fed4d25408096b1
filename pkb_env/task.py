"""The task suite: which tasks exist and how one is loaded. What a task IS lives in pkb_env/contract/.

A task is a folder `tasks/<name>/` with `reference.py` (shown to the agent verbatim; what the judge runs
for expected outputs and the baseline time) and `spec.py` defining `SPEC = TaskSpec(...)`. Folders whose
name starts with an underscore hold shared helpers, not tasks. docs/task_contract.md tells how to write one.

A dotted name (`contract_v3_tasks.routed_exchange`) is the import path of a task package outside the suite,
laid out like a task folder: the tests' example specs of contract features no task uses yet are judged end to
end this way (`tests/contract_v3_tasks/`). The suite (`task_names`, "all") never includes them; the rank
processes import them by the same path, so their folder must be on the judge's PYTHONPATH (the cells bind
every `sys.path` entry, pkb_env/sandbox/rootfs.py).
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from pkb_env.contract import (DTYPES, EXACT, InputContext, Preset, TaskError, TaskSpec, Tolerance, WorldSizes,
                              derive_seed)
from pkb_env.contract.signature import reference_parameters
from pkb_env.suite_index import unknown_task

__all__ = ["DTYPES", "EXACT", "InputContext", "Preset", "TaskError", "TaskSpec", "Tolerance", "WorldSizes",
           "derive_seed", "task_names", "size_problem", "runnable_tasks", "load_task", "load_reference", "pkb_variant",
           "pkb_variants", "TASKS_PACKAGE"]

TASKS_PACKAGE = "pkb_env.tasks"


@lru_cache(maxsize=None)
def task_names() -> tuple[str, ...]:
    """Every task in the suite, in name order."""
    pkg = importlib.import_module(TASKS_PACKAGE)
    return tuple(sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.ispkg and not m.name.startswith("_")))


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
    try:
        task.check_world_size(world_size, preset)   # its message names the task and the sizes it takes
    except TaskError as exc:
        return str(exc)
    return (task.output_problem(world_size, preset, resolved)
            or (task.cpu_reference_problem(world_size, preset, resolved) if cpu_reference else None))


def runnable_tasks(world_size: int, preset: str, dtype: str | None = None, cpu_reference: bool = False) -> list[str]:
    """The tasks of the suite that can be judged at this size (`size_problem`): what "the whole suite" means
    there (JudgeService.tasks asks with its executor's `cpu_reference`)."""
    return [n for n in task_names() if size_problem(load_task(n), world_size, preset, dtype, cpu_reference) is None]


@lru_cache(maxsize=None)
def load_task(name: str) -> TaskSpec:
    """The TaskSpec of `tasks/<name>/` (or of the package a dotted name imports), with its reference path
    filled in and its signature checked."""
    module = importlib.import_module(f"{_package(name)}.spec")
    spec: TaskSpec = module.SPEC
    if spec.name != name:
        raise TaskError(f"{_package(name).replace('.', '/')}/spec.py declares name {spec.name!r}; it must be "
                        f"{name!r} (the folder's name, or the dotted path of a package outside the suite)")
    pkb = getattr(module, "PKB", None)
    if pkb is not None:
        try:
            pkb.check({d.name: d for d in spec.inputs}, {o.name: o for o in spec.outputs},
                      f"{_package(name).replace('.', '/')}/spec.py")
        except ValueError as exc:
            raise TaskError(str(exc)) from None
    spec = replace(spec, reference_path=Path(module.__file__).with_name("reference.py"), pkb=pkb)
    params = reference_parameters(spec.reference_source)
    if params != spec.parameters:
        raise TaskError(f"task {name!r}: reference.py's solution takes {params} but spec.py declares inputs "
                        f"{spec.parameters}; declare one input per parameter, in order")
    return spec


def pkb_variant(spec: TaskSpec) -> TaskSpec | None:
    """The sibling spec stating PKB's problem as PKB states it (tasks/<name>/pkb/, docs/pkb_compat.md), where the
    task declares one."""
    if spec.pkb is None or spec.pkb.variant is None:
        return None
    return load_task(f"{_package(spec.name)}.{spec.pkb.variant}")


def pkb_variants() -> tuple[str, ...]:
    """The names of every PKB variant of the suite (docs/pkb_compat.md): tasks outside the suite, judged only for
    PKB-format files."""
    return tuple(variant.name for variant in (pkb_variant(load_task(n)) for n in task_names()) if variant is not None)


def load_reference(name: str) -> Callable[..., Any]:
    """The reference `solution` of a task (trusted code, imported only in judge-owned processes)."""
    return importlib.import_module(f"{_package(name)}.reference").solution


def _package(name: str) -> str:
    """The package of task `name`: `pkb_env.tasks.<name>` for the suite's, the name itself where it is dotted
    (a task package outside the suite, module docstring). TaskError naming the fix for anything else."""
    if isinstance(name, str) and "." in name:
        if not all(part.isidentifier() for part in name.split(".")):
            raise TaskError(f"task {name!r}: a dotted task name is an import path (identifiers joined by dots)")
        try:
            found = importlib.util.find_spec(f"{name}.spec") is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise TaskError(f"no task package {name!r}: a dotted task name imports a package outside the suite "
                            f"holding spec.py and reference.py; put its parent folder on PYTHONPATH")
        return name
    if not isinstance(name, str) or name not in task_names():
        raise TaskError(unknown_task(name, task_names()))   # the closest names, and where the list is
    return f"{TASKS_PACKAGE}.{name}"
