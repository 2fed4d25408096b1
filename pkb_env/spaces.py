"""Observation and action spaces, and the observation itself. Text spaces need a charset that covers code,
and explicit lengths.

Gymnasium's default Text charset is alphanumeric; ours is Python's `string.printable` (ASCII letters,
digits, punctuation and whitespace), and every text an observation holds is passed through `to_charset`.
"""
from __future__ import annotations

import string
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from pkb_env.service import TaskSession

CHARSET = frozenset(string.printable)
MAX_PROMPT_CHARS = 64_000
MAX_CODE_CHARS = 200_000
MAX_FEEDBACK_CHARS = 8_000
MAX_TASK_ID_CHARS = 64
MAX_WORLD_SIZE = 4096
MAX_SPEEDUP = 1e4  # best_speedup is reported clipped to this (a finite bound keeps the Box well defined)


def to_charset(text: str, limit: int) -> str:
    """`text` with characters outside the charset replaced by '?', cut to `limit` characters."""
    clean = "".join(c if c in CHARSET else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 15] + "\n...[truncated]"


def text(limit: int, min_length: int = 0) -> spaces.Text:
    return spaces.Text(max_length=limit, min_length=min_length, charset="".join(sorted(CHARSET)))


def observation_space(max_turns: int) -> spaces.Dict:
    return spaces.Dict({
        "prompt": text(MAX_PROMPT_CHARS, 1),
        "task_id": text(MAX_TASK_ID_CHARS, 1),
        "reference": text(MAX_CODE_CHARS, 1),
        "topology": text(MAX_FEEDBACK_CHARS),
        "feedback": text(MAX_FEEDBACK_CHARS),
        "turn": spaces.Discrete(max_turns + 1),
        "world_size": spaces.Discrete(MAX_WORLD_SIZE + 1),
        "best_speedup": spaces.Box(0.0, MAX_SPEEDUP, shape=(), dtype=np.float32),
    })


def observation(session: "TaskSession", feedback: str = "", turn: int = 0, best_speedup: float = 0.0) -> dict[str, Any]:
    """The observation of `session`'s task at `turn` (the env's, and what agents read wherever they act)."""
    return {
        "prompt": to_charset(session.prompt_after(feedback, turn), MAX_PROMPT_CHARS),
        "task_id": session.name,
        "reference": to_charset(session.reference, MAX_CODE_CHARS),
        "topology": to_charset(session.topology, MAX_FEEDBACK_CHARS),
        "feedback": to_charset(feedback, MAX_FEEDBACK_CHARS),
        "turn": turn,
        "world_size": session.world_size,
        "best_speedup": np.array(min(best_speedup, MAX_SPEEDUP), dtype=np.float32),
    }


def action_space() -> spaces.Text:
    """Any text: a raw completion (prose and a fenced code block) or bare code."""
    return text(MAX_CODE_CHARS, 0)
