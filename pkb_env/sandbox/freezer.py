"""Freezing a candidate's processes while the reference is timed beside them (docs/timing.md, "Interleaved pairs").

The speedup pairs each of the candidate's bursts with the reference's replay of the same calls, right after
it, so that the host's drift cancels in each ratio. The candidate's processes stay alive for its next burst,
so while the reference is timed they must not run: SIGSTOP, which no process can catch, block or ignore,
stops every thread of a process until SIGCONT.

What is stopped: every descendant of the rank set's cell (the namespace's PID 1, the ranks, whatever they
forked; orphans too, re-parented to that PID 1 or, without a PID namespace, to the ranks, which are
subreapers) and the strays a caller names (without namespaces: what the zygote adopted). A process can fork
between the listing and the signal, so the listing repeats until a pass finds no process that is not yet
stopped, every thread of each seen stopped. A set that keeps making processes faster than that within
`timeout_s` is refused (FreezeFailed): only a candidate does that, and its step fails.

Work a stopped process queued on a GPU before it stopped still runs: the rank's burst ends with the device
synchronised, and what a candidate's thread launched after that is the GPU probe's to catch (docs/timing.md).
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable

import psutil

STOPPED = {"T", "t", "Z", "X"}    # stopped, stopped by a tracer, zombie, dead: none runs code


class FreezeFailed(RuntimeError):
    """The processes could not all be stopped in time (they keep forking, or a signal was refused)."""


def descendants(roots: Iterable[int]) -> set[int]:
    """Every process under `roots` (not the roots): from each process's children lists in /proc (a few small
    reads per process; exact for a stopped parent, which is what `stop` relies on), else, on a kernel without
    them, from one scan of the whole process table."""
    found, todo = set(), list(roots)
    children = _children if os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children") else _table()
    while todo:
        for child in children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _per_thread(pid: int, name: str) -> list[bytes]:
    """/proc/<pid>/task/<tid>/<name> of every thread of `pid` (none once it is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return []
    found = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/{name}", "rb") as f:
                found.append(f.read())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def _children(pid: int) -> list[int]:
    return [int(k) for text in _per_thread(pid, "children") for k in text.split()]


def _table() -> Callable[[int], list[int]]:
    table: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            table.setdefault(ppid, []).append(proc.pid)
    return lambda pid: table.get(pid, [])


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of `pid` stopped (or the process gone): the state after the command's closing parenthesis."""
    return all(stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3].decode() in STOPPED
               for stat in _per_thread(pid, "stat"))


def stop(processes: Callable[[], set[int]], timeout_s: float) -> set[int]:
    """SIGSTOP every process `processes()` lists until a listing finds none still running; the set stopped.
    FreezeFailed (after resuming what was stopped) when that takes longer than `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    stopped: set[int] = set()
    while True:
        running = {pid for pid in processes() if pid not in stopped or not _all_threads_stopped(pid)}
        if not running:
            return stopped
        if time.monotonic() > deadline:
            resume(stopped)
            raise FreezeFailed(f"{len(running)} processes still running after {timeout_s:g} s of stopping "
                               f"(a process that keeps forking)")
        for pid in running:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            except PermissionError as exc:
                resume(stopped)
                raise FreezeFailed(f"the judge may not signal process {pid}: {exc}") from exc
            stopped.add(pid)


def resume(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
