"""Executors: where candidate and reference code runs. `make_executor` is the one way to get one.

| name          | ranks                     | backend: candidates / reference   | clock       | times mean anything |
|---------------|---------------------------|-----------------------------------|-------------|---------------------|
| cpu           | processes on the CPU      | host_staged (gloo, NCCL's forms)  | host        | yes                 |
|               |                           | / gloo                            |             |                     |
| cuda          | one process per GPU       | nccl / nccl                       | CUDA events | yes                 |
| cuda-emulated | several processes per GPU | host_staged (gloo, CUDA via host) | CUDA events | no (time-sliced GPU)|
|               |                           | / gloo on CPU ranks               |             |                     |

Everything that differs between them is data in the `Placement` (devices, backend, clock, calibration
sizes, limits) and the `ExecutorInfo` (whether times mean anything, hardware fingerprint, topology):
no other module asks an executor for its name. The judge sees an executor only through interface.py.

This package is the judge's side of the processes; what runs inside a rank is pkb_env/ranks/, the
sandbox that holds it pkb_env/sandbox/, and the wire between them pkb_env/wire/.
"""
from __future__ import annotations

import os
import platform
from dataclasses import replace

from pkb_env.config import EXECUTORS, JudgeConfig
from pkb_env.errors import ExecutorError
from pkb_env.hardware import GPU_DEVICE_NODES
from pkb_env.executors.capacity import world_size_limit
from pkb_env.executors.placement import ExecutorInfo, Placement, rank_cores
from pkb_env.executors.process import ProcessExecutor
from pkb_env.sandbox.limits import ResourceLimits
from pkb_env.wire.messages import HOST_STAGED, START_PHASES

# all_reduce sizes (bytes) whose best bus bandwidth is the calibrated B; GPUs need large messages to saturate.
GPU_CALIBRATION_SIZES = (1 << 20, 64 << 20, 256 << 20)
CPU_CALIBRATION_SIZES = (1 << 20, 8 << 20)


def gpu_count() -> int:
    """GPUs torch sees; 0 at once where no driver's device node exists (a bad world size is refused at once
    on CPU machines, without a torch import)."""
    if not any(os.path.exists(node) for node in GPU_DEVICE_NODES):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_executor(name: str, world_size: int) -> str:
    """'auto' becomes cuda when there are enough GPUs, cuda-emulated with fewer, cpu without any."""
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    if name != "auto":
        return name
    gpus = gpu_count()
    if gpus == 0:
        return "cpu"
    return "cuda" if gpus >= world_size else "cuda-emulated"


def cpu_fingerprint() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"cpu/{model}/{os.cpu_count()}cores"


def check_world_size(name: str, world_size: int) -> str:
    """The resolved executor name, once `world_size` is known to fit this machine (capacity.py), else ExecutorError."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ExecutorError(f"world_size must be a positive integer, got {world_size!r}")
    name = resolve_executor(name, world_size)
    gpus = gpu_count() if name != "cpu" else 0
    if name != "cpu" and gpus == 0:
        raise ExecutorError(f"executor {name!r} needs a CUDA GPU and torch sees none; use executor='cpu'")
    world_size_limit(name, gpus).check(world_size)
    return name


def make_executor(config: JudgeConfig) -> ProcessExecutor:
    """The executor `config` names, at its world size (checked against this machine first)."""
    world_size = config.world_size
    name = check_world_size(config.executor, world_size)
    if name == "cpu":
        # Candidates get gloo with NCCL's forms of the collectives (ranks/host_staged.py; nothing is staged on
        # CPU ranks): plain gloo refuses forms NCCL takes, e.g. a stacked all_gather_into_tensor output. The
        # trusted reference keeps plain gloo.
        reference = cpu_placement(world_size)
        return ProcessExecutor(ExecutorInfo("cpu", cpu_fingerprint(), True, "cpu"),
                               replace(reference, backend=HOST_STAGED), config, reference_placement=reference)
    gpus = gpu_count()
    from pkb_env.hardware import detect

    machine = detect()  # NVML: no CUDA context in the judge's process
    model = machine.gpus[0].name if machine.gpus else "unknown GPU"
    topology = machine.topology_name if machine.gpus else "unknown_gpu"
    if name == "cuda":
        placement = Placement(tuple(f"cuda:{r}" for r in range(world_size)), "nccl", ResourceLimits(), clock="cuda",
                              calibration_sizes=GPU_CALIBRATION_SIZES, spares=len(START_PHASES) + 1,
                              cpus=rank_cores(world_size) if config.pin_ranks else None, symmetric=True)
        info = ExecutorInfo("cuda", f"cuda/{model}/x{world_size}", True, topology)
    else:
        # gloo's transport with CUDA tensors staged through host memory (ranks/host_staged.py): plain gloo
        # aborts on a CUDA tensor's send/recv, and NCCL refuses two ranks on one GPU.
        placement = Placement(tuple(f"cuda:{r % gpus}" for r in range(world_size)), HOST_STAGED, ResourceLimits(),
                              clock="cuda", calibration_sizes=(1 << 20,))
        info = ExecutorInfo("cuda-emulated", f"cuda-emulated/{model}/{world_size}on{gpus}", False, topology)
    if name == "cuda":
        return ProcessExecutor(info, placement, config)
    # Several ranks per GPU: torch symmetric memory refuses overlapping devices unless told otherwise, and
    # NCCL refuses two ranks on one GPU, so the (trusted) reference runs on CPU ranks over gloo.
    return ProcessExecutor(info, placement, config, extra_env={"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"},
                           reference_placement=cpu_placement(world_size))


def cpu_placement(world_size: int) -> Placement:
    limits = ResourceLimits(address_space_bytes=max(2 << 30, int(_total_memory() * 0.6 / world_size)))
    return Placement(tuple("cpu" for _ in range(world_size)), "gloo", limits, clock="host",
                     calibration_sizes=CPU_CALIBRATION_SIZES)


def _total_memory() -> int:
    import psutil

    return psutil.virtual_memory().total
