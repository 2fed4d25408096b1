"""Cores: rank r of every rank set on one core of its own, and the check that a candidate stayed there.

A host-bound call's time is the core's: the cores of one host differ by far more than a speedup's spread may, and a
process keeps its core's speed for its life (docs/measurements/2026-12-03-timing-h200.md, "A candidate's speedup
outside the judge": `benchmarks/candidate_truth.py --pin`), so the two halves of a pair (the candidate's rank r and
the reference's, different processes by design) can only be compared where both ran on one core (docs/timing.md,
"One core per rank"). A rank pins every thread of its process when it loads a task (`pin_process`, before any
candidate code; threads and processes made later inherit it). A process may still change its own affinity, so the
judge looks at every thread of the candidate's processes whenever it stops them for a pair (`off_cores`).
"""
from __future__ import annotations

import os
from typing import Iterable


def pin_process(cpu: int) -> None:
    """Every thread of this process (CUDA's and NCCL's included) on core `cpu`."""
    _confine(_threads("self") or [0], {cpu})   # no /proc: this thread at least (the rank's calls run on it)


def move(pids: Iterable[int], allowed: set[int]) -> None:
    """Every thread of `pids` onto `allowed` (processes about to be killed: what their end costs the kernel,
    their CUDA contexts' teardown above all, then runs there, not on a rank's core)."""
    for pid in pids:
        _confine(_threads(pid), allowed)


def _confine(tids: Iterable[int], allowed: set[int]) -> None:
    """Threads `tids` onto cores `allowed`; one that ended meanwhile (or is not ours to move) is left as it is."""
    for tid in tids:
        try:
            os.sched_setaffinity(tid, allowed)
        except (ProcessLookupError, PermissionError):
            continue


def off_cores(pids: Iterable[int], allowed: set[int]) -> str | None:
    """The first thread of `pids` that may run on a core outside `allowed`, in words; None when none may."""
    for pid in pids:
        for tid in _threads(pid):
            try:
                cores = os.sched_getaffinity(tid)
            except OSError:
                continue
            if not cores <= allowed:
                return (f"thread {tid} of process {pid} may run on cores {_spans(cores)}; its rank was given "
                        f"{_spans(allowed)}")
    return None


def _threads(pid: int | str) -> list[int]:
    """The thread ids of process `pid` ("self": this one); none once it is gone, or without /proc."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _spans(cores: set[int]) -> str:
    """1,2,3,7 -> "1-3,7"."""
    ordered, parts = sorted(cores), []
    start = prev = ordered[0] if ordered else None
    for c in ordered[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(parts)
