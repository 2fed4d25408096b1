"""The agent protocol: observation in, action text out."""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Agent(Protocol):
    name: str

    def act(self, observation: dict[str, Any]) -> str:
        """The action for this observation: a completion or bare code defining `solution`."""
        ...
