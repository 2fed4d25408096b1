"""PKB's file names to pkb-env's tasks (docs/pkb_compat.md, "File names").

PKB names a solution `<N>_<problem>_<backend>.py` (`12_allgather_gemm_cuda.py`) and a reference `<N>_<problem>.py`.
A file maps to the task whose `Pkb` declaration (contract/pkb.py) names that problem, by name first: PKB renumbered
its problems after its published corpus was written (that corpus has an 88-problem numbering: 33 was dropped,
`fsdp_adamw_sharded` sat at 47, and 11, 12, 14 and 18 had other names), so a name is the firmer key. Where the
name is PKB's current one, or unknown, the number (`pkb_id`) decides.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pkb_env.task import load_task, task_names

BACKENDS = ("cuda", "triton", "parallelkittens")
FILE_NAME = re.compile(r"^(?P<number>\d+)_(?P<problem>.+?)(?:_(?P<backend>" + "|".join(BACKENDS) + r"))?$")
# PKB problems with no pkb-env task, and why.
RETIRED = {"fsdp_adamw_sharded": "a problem of PKB's older numbering (47 in its published corpus, 46 in its "
                                 "reference folder then) that PKB replaced with gemv_decode before its release; "
                                 "pkb-env has no task for it"}


@dataclass(frozen=True)
class PkbFile:
    """One file's place: the task it maps to (None: none, `why` says so), PKB's number and name, its backend."""

    path: Path
    number: int | None
    problem: str
    backend: str
    task: str | None
    how: str               # "name" | "number" | "alias" (an older name) | ""
    why: str = ""


@lru_cache(maxsize=None)
def problems() -> dict[str, list[tuple[str, str]]]:
    """PKB's problem names (current and older) -> [(task, "name" | "alias")] over the suite."""
    table: dict[str, list[tuple[str, str]]] = {}
    for name in task_names():
        spec = load_task(name)
        if spec.pkb is None:
            continue
        table.setdefault(spec.pkb.name, []).append((name, "name"))
        for alias in spec.pkb.aliases:
            table.setdefault(alias, []).append((name, "alias"))
    return table


@lru_cache(maxsize=None)
def by_number() -> dict[int, str]:
    """PKB id -> task, over the suite."""
    return {load_task(n).pkb_id: n for n in task_names() if load_task(n).pkb_id is not None}


def classify(path: str | Path) -> PkbFile:
    """The task a PKB file maps to, by its name (the module docstring)."""
    path = Path(path)
    match = FILE_NAME.match(path.stem)
    if match is None:
        return PkbFile(path, None, path.stem, "", None, "", f"{path.name} is not named as PKB names files "
                                                             f"(<N>_<problem>[_<backend>].py)")
    number, problem, backend = int(match["number"]), match["problem"], match["backend"] or ""
    found = problems().get(problem, [])
    if len(found) == 1:
        task, how = found[0]
        return PkbFile(path, number, problem, backend, task, how)
    if problem in RETIRED:
        return PkbFile(path, number, problem, backend, None, "", f"PKB's {problem}: {RETIRED[problem]}")
    task = by_number().get(number)
    if task is None:
        return PkbFile(path, number, problem, backend, None, "", f"no task has PKB id {number} or PKB name "
                                                                 f"{problem!r}")
    return PkbFile(path, number, problem, backend, task, "number")


def pkb_files(folder: str | Path) -> list[PkbFile]:
    """Every `.py` file of `folder`, classified, in PKB's number order."""
    folder = Path(folder)
    found = [classify(p) for p in folder.glob("*.py")]
    return sorted(found, key=lambda f: (f.number if f.number is not None else 1 << 30, f.path.name))
