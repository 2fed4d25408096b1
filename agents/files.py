"""Submits candidate files from disk: one file, or each `*.py` of a folder in turn."""
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

    def act(self, observation: dict[str, Any]) -> str:
        if self.by_task:
            matches = [f for f in self.files if f.stem == observation["task_id"]]
            if not matches:
                raise FileNotFoundError(f"no file named {observation['task_id']}.py among {len(self.files)} files")
            return _read(matches[0])
        path = self.files[self._next % len(self.files)]
        self._next += 1
        return _read(path)


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")
