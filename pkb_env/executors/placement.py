"""Where an executor's ranks run, as data: whatever differs between cpu, cuda and cuda-emulated lives here
(no other module asks an executor for its name)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from pkb_env.sandbox.limits import ResourceLimits


@dataclass(frozen=True)
class Placement:
    """devices: one device string per rank; backend: the process-group backend; clock: "host" (CPU ranks)
    or "cuda" (CUDA events behind a device gate); calibration_sizes: all_reduce sizes (bytes) whose best
    bus bandwidth is the calibrated B (GPUs need large messages to saturate a link); spares: candidate
    rank sets kept pre-started where cells have namespaces (executors/spares.py): a GPU rank starts in four
    phases of a fraction of a second each (wire/messages.START_PHASES; docs/measurements/2026-12-01-timing-h200.md),
    CPU ranks in a fraction of that; cpus: per rank, the one core rank r of every rank set runs on once it serves
    a step (the reference's and each candidate's alike: sandbox/cores.py), None where the scheduler decides;
    symmetric: every rank sets torch's symmetric memory up as it starts (ranks/server.py, `symmetric`), where
    candidates may use it.
    """

    devices: tuple[str, ...]
    backend: str
    limits: ResourceLimits
    clock: str = "host"
    calibration_sizes: tuple[int, ...] = (1 << 20, 8 << 20)
    pg_timeout_s: float = 120.0
    spares: int = 1
    cpus: tuple[int, ...] | None = None
    symmetric: bool = False

    @property
    def world_size(self) -> int:
        return len(self.devices)

    @property
    def gpu(self) -> bool:
        return self.devices[0].startswith("cuda")

    @property
    def on_cpu(self) -> bool:
        return all(device == "cpu" for device in self.devices)


def rank_cores(world_size: int) -> tuple[int, ...] | None:
    """One core per rank, the highest-numbered this process may use (rank 0 the last), where it may use at
    least two per rank (the others for the judge, starting rank sets and the system); else None."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2 * world_size:
        return None
    return tuple(cores[-1 - rank] for rank in range(world_size))


@dataclass(frozen=True)
class ExecutorInfo:
    name: str                      # "cpu" | "cuda" | "cuda-emulated"
    hardware: str                  # fingerprint used as the key of cached reference times and calibrations
    performance_available: bool    # False when ranks time-slice one device: times would mean nothing
    topology: str                  # name of the topology config (configs/topologies/<name>.yaml)
