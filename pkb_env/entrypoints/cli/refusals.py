"""What the command line refuses before anything heavy is imported: every bad input that needs no judge.

An unknown task, a preset or dtype the task lacks, a world size its shapes cannot take, a missing or empty
candidate file, an agent spec that cannot work (pkb_env/agents/specs.py): each was refused only after torch was imported (the specs import it), 1.5 s at rest and 20-30 s on
a loaded machine for a misspelt name. These checks read the suite's index (pkb_env/suite_index.py: data generated
from the specs) and the filesystem; what they cannot decide (a dotted task name, a world size past the index, an
output too large for a preset) the judge still decides, as before.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pkb_env import suite_index


def refuse(args: argparse.Namespace) -> None:
    """Raise ValueError (FileNotFoundError for a missing path) naming the problem and the fix, or return."""
    placement = (getattr(args, "preset", None), getattr(args, "dtype", None), getattr(args, "world_size", None))
    task = getattr(args, "task", None)
    if isinstance(task, str):
        _check_task(task, *placement)
    tasks = getattr(args, "tasks", None)
    if isinstance(tasks, str) and tasks.strip() not in ("", "all"):
        for name in dict.fromkeys(n.strip() for n in tasks.split(",") if n.strip()):
            _check_task(name, *placement)
    path = getattr(args, "path", None)
    if isinstance(path, Path):
        check_candidate_path(path)
    agent = getattr(args, "agent", None)
    if isinstance(agent, str):
        from pkb_env.agents.specs import check_spec

        check_spec(agent, getattr(args, "base_url", None), getattr(args, "concurrency", None))


def _check_task(task: str, preset: str | None, dtype: str | None, world_size: int | None) -> None:
    problem = suite_index.problem(task, preset, dtype, world_size)
    if problem:
        raise ValueError(problem)


def check_candidate_path(path: Path) -> None:
    """A candidate file that exists and holds something, or a folder with at least one .py file. An empty file
    named on the command line is a mistake to fix, not a sample to judge (in a folder of a model's completions,
    an empty one is judged: unparsable)."""
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}; pass a .py file or a folder of them")
    if path.is_dir():
        if not any(path.glob("*.py")):
            raise FileNotFoundError(f"folder {path} holds no .py files; pass a .py file or a folder of them")
        return
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path} ({exc.strerror}); pass a readable .py file") from None
    if not text.strip():
        raise ValueError(f"{path} is empty: nothing to judge; write a module defining solution(...) in it (the "
                         f"task's reference is a start: `pkb-env show TASK` prints it)")
