"""OS-level containment of rank processes: death signals, resource limits, killing whole process trees.

Linux-specific calls go through prctl(2) via ctypes; elsewhere they are skipped (the judge still kills
by process group and process tree).
"""
from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# The most a rank may write to any one file, its printed output (stdout and stderr, redirected to its log) included:
# a rank printing without end would fill the judge's disk. The prompt's rules state it (pkb_env/prompt.py).
RANK_FILE_BYTES = 64 << 20


def prctl(option: int, value: int) -> None:
    """prctl(2) with one argument; raises OSError on failure; does nothing off Linux."""
    if sys.platform.startswith("linux") and ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Get `sig` (SIGKILL: die) when the process that forked us dies: nothing outlives a crashed judge."""
    prctl(PR_SET_PDEATHSIG, sig)


def become_subreaper() -> None:
    """Adopt orphaned descendants, so a double-forked grandchild stays findable in our process tree."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


@dataclass(frozen=True)
class ResourceLimits:
    """Per-rank limits. `address_space_bytes` is only set for CPU ranks (CUDA reserves huge VA ranges)."""

    file_size_bytes: int = RANK_FILE_BYTES
    open_files: int = 1024
    address_space_bytes: int | None = None
    cpu_seconds: int | None = None

    def apply(self) -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversize writes fail with EFBIG instead of killing
        _set(resource.RLIMIT_CORE, 0)
        _set(resource.RLIMIT_FSIZE, self.file_size_bytes)
        _set(resource.RLIMIT_NOFILE, self.open_files)
        if self.address_space_bytes:
            _set(resource.RLIMIT_AS, self.address_space_bytes)
        if self.cpu_seconds:
            _set(resource.RLIMIT_CPU, self.cpu_seconds)


def file_size_advice(exc: BaseException) -> str | None:
    """What to tell a candidate whose write failed at the file-size limit (EFBIG: the bare 'OSError: [Errno 27] File
    too large' named neither the cap nor what counts against it), or None for any other exception."""
    if not (isinstance(exc, OSError) and exc.errno == errno.EFBIG):
        return None
    cap = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    size = f"{cap >> 20} MiB" if cap != resource.RLIM_INFINITY else "its limit"
    return (f"a rank may write at most {size} to any one file, and what it prints goes to one, its log of stdout "
            f"and stderr; print a summary, not whole tensors, and keep large data in tensors, not files")


def _set(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, hard))


def kill_tree(pids: list[int], timeout: float = 5.0) -> list[int]:
    """SIGKILL `pids`, their process groups and every descendant; return pids still alive after `timeout`.

    Descendants are collected repeatedly (a forking process can add more while we kill), each rank's
    process group is killed too (children that stayed in it), and ranks are subreapers, so orphans of
    double forks are still their descendants.
    """
    victims: set[int] = set()
    for _ in range(5):
        found = set()
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                found.add(pid)
                found.update(c.pid for c in proc.children(recursive=True))
            except psutil.Error:
                continue
        new = found - victims
        victims |= found
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in new:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not new:
            break
    deadline = time.monotonic() + timeout
    alive = victims
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if running(p)}
        if alive:
            time.sleep(0.01)
    return sorted(alive)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe_status(status: int | None) -> str:
    """'exited with code 3' / 'was killed by SIGSEGV' from a raw wait status."""
    if status is None:
        return "ended (status unknown)"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was killed by {name}"
    return f"exited with code {os.WEXITSTATUS(status)}"
