"""The start line of a timed burst: one page of memory that only the judge's process can write.

Every rank of a rank set maps the page read-only; the judge stores a number (the epoch of a burst)
there to start the burst on every rank at once. On GPUs a kernel spinning on the page (cuda_gate.py)
holds each device at the line while its host queues nothing; on CPU ranks the host polls the page
itself. Either way the burst starts at the judge's store, not at a moment a rank chooses.

The page is a sealed memfd (Linux 5.1+): after the judge maps it writable, the seals forbid any new
writable mapping, `write(2)` and resizing, so a candidate holding the file (it cannot: the rank closes
it after mapping) or the mapping (it can) still cannot move the line or truncate the page under the
judge. The rank registers the mapping with CUDA read-only for the same reason.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import time

import numpy as np

PAGE_BYTES = 4096
# fcntl lacks F_SEAL_FUTURE_WRITE before Python 3.12; the value is Linux's (include/uapi/linux/fcntl.h).
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x0010)
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SEAL


class ReleaseTimeout(TimeoutError):
    """The judge did not release a burst in time (it failed, or another rank did)."""


class ReleasePage:
    """The judge's side: the page, writable here only. `fd` is what ranks receive (then close)."""

    def __init__(self):
        self.fd = os.memfd_create("pkb-release", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, PAGE_BYTES)
        self._map = mmap.mmap(self.fd, PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, SEALS)
        self._words = np.frombuffer(self._map, dtype=np.uint32)
        self.epoch = 0

    def next_epoch(self) -> int:
        """The number the next burst waits for (never stored yet)."""
        self.epoch += 1
        return self.epoch

    def release(self, epoch: int) -> float:
        """Start the burst `epoch` on every rank; returns the judge's clock just before the store."""
        now = time.monotonic()
        self._words[0] = epoch  # one aligned 32-bit store: no rank can see half of it
        return now

    def close(self) -> None:
        if self.fd >= 0:
            del self._words
            self._map.close()
            os.close(self.fd)
            self.fd = -1


class PageView:
    """A rank's side: the page mapped read-only; `address` is where it lives in this process."""

    def __init__(self, fd: int):
        self._map = mmap.mmap(fd, PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        os.close(fd)  # the mapping keeps the page; the candidate gets no descriptor to it
        self._words = np.frombuffer(self._map, dtype=np.uint32)
        self.address = self._words.ctypes.data

    def epoch(self) -> int:
        return int(self._words[0])

    def wait(self, epoch: int, deadline: float, pause_s: float = 0.0) -> float:
        """Spin until the judge stores `epoch` (pausing `pause_s` between looks); the time it was seen."""
        words, clock = self._words, time.monotonic
        while words[0] < epoch:
            if pause_s:
                time.sleep(pause_s)
            if clock() > deadline:
                raise ReleaseTimeout(f"burst {epoch} was not released in time")
        return clock()
