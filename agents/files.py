"""Submits candidate files from disk: one file, or each `*.py` of a folder in turn; or a folder of PKB-format files
named as ParallelKernelBench names them (`PkbFileAgent`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any


class FileAgent:
    """Cycles through `paths` (a file or a folder of `.py` files); each act() returns the next one.

    A folder may also hold one file per task, named `<task>.py`: with `by_task=True` the agent picks the
    file matching the observation's task_id.
    """

    name = "file"

    def __init__(self, path: str | Path, by_task: bool = False):
        root = Path(path)
        if not root.exists():
            raise FileNotFoundError(f"no such file or folder: {root}; pass a .py file or a folder of them")
        self.files = sorted(root.glob("*.py")) if root.is_dir() else [root]
        if not self.files:
            raise FileNotFoundError(f"folder {root} holds no .py files")
        self.by_task = by_task
        self._next = 0

    def has(self, task: str) -> bool:
        """Whether a by-task folder holds a file for `task`."""
        return any(f.stem == task for f in self.files)

    def act(self, observation: dict[str, Any]) -> str:
        if self.by_task:
            matches = [f for f in self.files if f.stem == observation["task_id"]]
            if not matches:
                raise FileNotFoundError(f"no file named {observation['task_id']}.py among {len(self.files)} files")
            return _read(matches[0])
        path = self.files[self._next % len(self.files)]
        self._next += 1
        return _read(path)


class PkbFileAgent(FileAgent):
    """A folder of PKB-format files (`12_allgather_gemm_cuda.py`), each mapped to its task by PKB's problem name and
    number (pkb_env.compat.files); judged with `JudgeConfig(pkb=True)`. Where several files map to one task (a
    CUDA and a Triton one), the first in name order is taken; `skipped` says which were left out and why."""

    name = "pkb"

    def __init__(self, path: str | Path):
        from pkb_env.compat.files import pkb_files

        super().__init__(path, by_task=True)
        self.tasks: dict[str, Path] = {}
        self.skipped: list[tuple[Path, str]] = []
        for found in pkb_files(path):
            if found.task is None:
                self.skipped.append((found.path, found.why))
            elif found.task in self.tasks:
                self.skipped.append((found.path, f"{self.tasks[found.task].name} is already the file for {found.task}"))
            else:
                self.tasks[found.task] = found.path

    def has(self, task: str) -> bool:
        return task in self.tasks

    def act(self, observation: dict[str, Any]) -> str:
        path = self.tasks.get(observation["task_id"])
        if path is None:
            raise FileNotFoundError(f"no PKB file for task {observation['task_id']} among {len(self.files)} files")
        return _read(path)


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")
