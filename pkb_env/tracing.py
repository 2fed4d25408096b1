"""Where the judge's time goes: named spans of its operations, reported to a sink when one is set.

`JudgeService(config, trace=sink)` calls `sink(name, seconds)` after each operation of a step: the
requests to the ranks (load, trials, burst, fingerprints, replay), waiting for a candidate's ranks
(candidate ranks), ending them (end, release), stopping the starting spares before a burst (settle, inside
burst), asking a rank set for a burst until every rank waits at the gate (gate candidate, gate reference, inside
burst and replay: the sink is called just before the release, so a test can look at what else runs then:
tests/executors/test_timed_work.py), letting them go on after a step's timing (spares),
and comparing fingerprints (compare). benchmarks/step_latency.py --operations tabulates them. Without a
sink a span costs one attribute test.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

Sink = Callable[[str, float], None]


class Tracer:
    def __init__(self, sink: Sink | None = None):
        self.sink = sink

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        if self.sink is None:
            yield
            return
        start = time.perf_counter()
        try:
            yield
        finally:
            self.sink(name, time.perf_counter() - start)
