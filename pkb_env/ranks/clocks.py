"""The clock of a rank, chosen once from its placement: what "start", "mark" and "end" of a burst mean.

A burst (bursts.py) is the same everywhere: arm, report the gate queued, wait for the judge's release,
start, K calls with a mark every few calls, stop, finish. Only the clock differs:

* `HostClock` (CPU ranks): the host's monotonic clock is the device. The burst starts when the rank
  sees the release; marks and end are host timestamps.
* `CudaClock` (GPU ranks): CUDA events on the caller's stream. `arm` queues the device gate
  (cuda_gate.py) and the start event behind it, so the device starts at the judge's release whatever
  its host does; `finish` waits for the end event, then for the whole device: work still running on
  other streams after the end event (`idle_s`) escaped the timed stream. Between bursts `flush` writes
  twice the L2 cache, so no call finds its inputs in cache.

Both expose `sync` (a full device synchronisation where there is a device) for the trials.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from pkb_env.ranks.cuda_gate import DeviceGate, GateUnavailable
from pkb_env.wire.gate import PageView
from pkb_env.ranks.tripwire import JUDGE, watch


@dataclass
class BurstTimes:
    """What a rank measured of one burst (its report to the judge, who checks it against its own clock)."""

    seen_at: float          # monotonic time the release was seen by this rank's host
    ended_at: float         # monotonic time the end of the burst was seen by this rank's host
    busy_s: float           # start to end on this rank's clock (device events on GPUs)
    marks: list[float]      # seconds from start to each mark
    idle_s: float | None    # device busy after the end (GPUs), seconds
    host_s: float = 0.0     # host time to issue the calls
    wait_s: float | None = None   # before the burst: one tiny kernel's launch to completion (GPUs; `device_wait`)


class HostClock:
    kind = "host"
    pause_s = 50e-6  # CPU ranks share cores: poll the page politely

    def __init__(self, page: PageView):
        self.page = page
        self.gate = "host (the rank's host polls the judge's page)"
        self._start = 0.0
        self._marks: list[float] = []
        self._end = 0.0

    def facts(self) -> dict:
        return {"clock": self.kind, "gate": self.gate, "cache_bytes": 0, "memory_bytes": 0}

    def sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def arm(self, epoch: int, marks: int) -> None:
        self._marks = []

    def start(self, seen_at: float) -> None:
        self._start = seen_at

    def mark(self) -> None:
        self._marks.append(JUDGE.monotonic())

    def stop(self) -> None:
        self._end = JUDGE.monotonic()

    def finish(self) -> BurstTimes:
        return BurstTimes(0.0, self._end, self._end - self._start, [m - self._start for m in self._marks], None)


GATE_LAG_S = 0.1  # a device that leaves its gate this long after its host saw the release is not gated


class CudaClock:
    kind = "cuda"
    pause_s = 0.0  # GPU hosts have cores to spare: spin, so the host starts within microseconds

    def __init__(self, page: PageView, device: torch.device):
        self.page = page
        self.device = device
        props = torch.cuda.get_device_properties(device)
        self.cache_bytes = int(getattr(props, "L2_cache_size", 0))
        self.memory_bytes = int(props.total_memory)
        self._scratch: torch.Tensor | None = None
        self._probe = torch.zeros(1, device=device)
        self._wait: float | None = None
        try:
            self._gate: DeviceGate | None = DeviceGate(page.address)
            self.gate = "device"
        except Exception as exc:  # noqa: BLE001  (GateUnavailable, or any driver surprise: fall back, say why)
            self._gate = None
            self.gate = f"host ({exc if isinstance(exc, GateUnavailable) else f'{type(exc).__name__}: {exc}'})"[:300]
        self._begin = JUDGE.event(enable_timing=True)
        self._end = JUDGE.event(enable_timing=True)
        self._marks: list = []
        self._used = 0
        self._stream = None
        self._gated = False   # this burst's start waits behind the device gate
        self._seen = 0.0      # when this rank's host saw the release

    def facts(self) -> dict:
        return {"clock": self.kind, "gate": self.gate, "cache_bytes": self.cache_bytes,
                "memory_bytes": self.memory_bytes, "device_name": torch.cuda.get_device_name(self.device)}

    def sync(self) -> None:
        JUDGE.synchronize()

    def flush(self) -> None:
        """Evict every input from L2: write twice its size (outside any timed window)."""
        if self.cache_bytes:
            if self._scratch is None:
                self._scratch = torch.empty(2 * self.cache_bytes, dtype=torch.uint8, device=self.device)
            self._scratch.zero_()

    def arm(self, epoch: int, marks: int) -> None:
        torch.cuda.set_stream(torch.cuda.default_stream(self.device))  # a candidate may have left another current
        self._stream = torch.cuda.current_stream(self.device)
        while len(self._marks) < marks:  # CUDA creates an event at its first record: do that here, not in the burst
            event = JUDGE.event(enable_timing=True)
            JUDGE.record(event, self._stream)
            self._marks.append(event)
        self._used = 0
        JUDGE.synchronize()
        self._wait = device_wait(self._probe)
        self._gated = False
        if self._gate is not None:
            try:
                self._gate.launch(epoch, self._stream.cuda_stream)
            except RuntimeError as exc:
                self._disable(f"launching it failed: {exc}")
            else:
                self._gated = True
                JUDGE.record(self._begin, self._stream)

    def start(self, seen_at: float) -> None:
        self._seen = seen_at
        if not self._gated:
            JUDGE.record(self._begin, self._stream)

    def mark(self) -> None:
        JUDGE.record(self._marks[self._used], self._stream)
        self._used += 1

    def stop(self) -> None:
        JUDGE.record(self._end, self._stream)

    def finish(self) -> BurstTimes:
        JUDGE.event_synchronize(self._end)
        ended_at = JUDGE.monotonic()
        JUDGE.synchronize()  # every stream of the device: what is still running escaped the timed stream
        idle = JUDGE.monotonic() - ended_at
        elapsed = JUDGE.elapsed_time
        marks = [elapsed(self._begin, m) / 1e3 for m in self._marks[:self._used]]
        busy = elapsed(self._begin, self._end) / 1e3
        if self._gated and (ended_at - self._seen) - busy > GATE_LAG_S:  # the device left its gate late
            self._disable(f"it released the device {((ended_at - self._seen) - busy) * 1e3:.0f} ms after the host")
        return BurstTimes(0.0, ended_at, busy, marks, idle, wait_s=self._wait)

    def _disable(self, why: str) -> None:
        """Fall back to a host-side start for the rest of this rank's life (facts say so at the next start)."""
        self._gate = None
        self.gate = f"host (the device gate was disabled: {why})"[:300]
        print(f"timing: {self.gate}", flush=True)  # the rank's log: a failure's log tail shows it


def device_wait(probe: torch.Tensor, tries: int = 3) -> float:
    """Seconds from launching one tiny kernel to seeing it complete, the least of `tries`: tens of microseconds where
    no other process has work on the GPU; up to a timeslice (milliseconds) where one does, because kernels of two
    processes do not run together (without MPS) and the GPU switches between them. Measured by the reference
    before each replay of a candidate's burst: a stopped candidate's kernel still running shows here
    (docs/timing.md, "Interleaved pairs")."""
    best = float("inf")
    for _ in range(tries):
        start = JUDGE.monotonic()
        probe.add_(1)
        JUDGE.synchronize()
        best = min(best, JUDGE.monotonic() - start)
    return best


def make_clock(kind: str, page: PageView, device: torch.device) -> HostClock | CudaClock:
    """The clock a placement names ("host" or "cuda")."""
    if kind == "cuda":
        return CudaClock(page, device)
    if kind == "host":
        return HostClock(page)
    raise ValueError(f"unknown clock {kind!r}; a placement's clock is 'host' or 'cuda'")


watch(HostClock, "arm", "start", "mark", "stop", "finish")
watch(CudaClock, "arm", "start", "mark", "stop", "finish", "flush")
