"""A step's seconds billed to whoever spends them: a stopwatch that can hand a block of its time to another.

Each of the candidate's stages runs on a watch of its own (record.stage_seconds). Inside the TIME stage, the
reference's half of every pair (its replay and fingerprints: judge/reference.Pairing) is the reference's work,
billed to it (record.reference.replay_s): the stage's watch hands those blocks to the reference's, and stops
meanwhile. Each second is counted once, where it is spent; nothing is subtracted after the fact.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


class Stopwatch:
    def __init__(self) -> None:
        self.seconds = 0.0
        self._since: float | None = None   # while running: when the current block began

    @contextmanager
    def running(self) -> Iterator["Stopwatch"]:
        """The block's seconds are added to this watch (less any it hands to another)."""
        self._since = time.perf_counter()
        try:
            yield self
        finally:
            self.seconds += time.perf_counter() - self._since
            self._since = None

    @contextmanager
    def handing(self, other: "Stopwatch") -> Iterator[None]:
        """The block's seconds go to `other`; this watch, where it runs, stops for the block."""
        was_running = self._since is not None
        if was_running:
            self.seconds += time.perf_counter() - self._since
        try:
            with other.running():
                yield
        finally:
            if was_running:
                self._since = time.perf_counter()
