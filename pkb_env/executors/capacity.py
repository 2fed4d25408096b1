"""How many ranks this machine can run: a world-size limit per executor, checked before anything starts.

Every rank is a process that must be scheduled for every collective, so a world size far beyond the
machine does not fail: it crawls. The limit turns that into an error that names the limit and the fix, in well under a second (no torch import without a
GPU). The over-subscription factors are stated, not guessed per call:

| executor      | limit                                   | why                                                   |
|---------------|-----------------------------------------|-------------------------------------------------------|
| cpu           | cores x CPU_RANKS_PER_CORE (32)         | slow but judged at the limit; past it a step crawls   |
| cuda          | GPUs                                    | one process per GPU; NCCL refuses two ranks on one    |
| cuda-emulated | GPUs x EMULATED_RANKS_PER_GPU (8), and  | every rank holds a CUDA context of its own on a       |
|               | the cpu limit (its reference runs there)| shared GPU; the reference runs on CPU ranks           |

`cores` are the cores this process may run on (its CPU affinity), not the machine's count.
PKB_ENV_MAX_WORLD_SIZE=N replaces the cpu and cuda-emulated limits (for a machine you know better than this
table); nothing replaces the cuda one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from pkb_env.errors import ExecutorError

CPU_RANKS_PER_CORE = 32
EMULATED_RANKS_PER_GPU = 8
OVERRIDE = "PKB_ENV_MAX_WORLD_SIZE"


@dataclass(frozen=True)
class WorldSizeLimit:
    executor: str
    limit: int
    derivation: str  # how the limit follows from the machine, in words

    def check(self, world_size: int) -> None:
        if world_size > self.limit:
            raise ExecutorError(
                f"world size {world_size} is more than the {self.executor} executor can run here: the limit is "
                f"{self.limit} ({self.derivation}). Pass world_size <= {self.limit} (--world-size on the command "
                f"line)" + ("" if self.executor == "cuda" else
                           f", or set {OVERRIDE}={world_size} to run it anyway (ranks then time-slice the machine: "
                           f"steps slow down in proportion)"))


def usable_cores() -> int:
    """Cores this process may be scheduled on (its affinity mask; containers and taskset narrow it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def world_size_limit(executor: str, gpus: int) -> WorldSizeLimit:
    """The limit for a resolved executor name ("cpu" | "cuda" | "cuda-emulated") on a machine with `gpus`."""
    if executor == "cuda":  # a hard limit: no override gives a rank a GPU of its own that is not there
        return WorldSizeLimit("cuda", gpus, f"{gpus} GPU(s), one rank per GPU; use executor 'cuda-emulated' to "
                                            f"run more ranks than GPUs, for correctness only")
    override = os.environ.get(OVERRIDE)
    if override:
        try:
            value = int(override)
        except ValueError:
            value = 0
        if value < 1:
            raise ExecutorError(f"{OVERRIDE}={override!r} is not a positive integer: set it to the largest world "
                                f"size to allow, or unset it to use the limit derived from the machine")
        return WorldSizeLimit(executor, value, f"set by {OVERRIDE}")
    cores = usable_cores()
    cpu = WorldSizeLimit("cpu", cores * CPU_RANKS_PER_CORE, f"{cores} usable core(s) x {CPU_RANKS_PER_CORE} ranks "
                                                            f"per core")
    if executor == "cpu":
        return cpu
    emulated = gpus * EMULATED_RANKS_PER_GPU
    if emulated <= cpu.limit:
        return WorldSizeLimit(executor, emulated, f"{gpus} GPU(s) x {EMULATED_RANKS_PER_GPU} ranks per GPU")
    return WorldSizeLimit(executor, cpu.limit, f"the reference of an emulated step runs on CPU ranks: "
                                               f"{cpu.derivation}")
