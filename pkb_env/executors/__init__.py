"""Executors: where candidate and reference code runs. `make_executor` is the one way to get one.

| name          | ranks                     | backend: candidates / reference   | clock       | times mean anything |
|---------------|---------------------------|-----------------------------------|-------------|---------------------|
| cpu           | processes on the CPU      | host_staged (gloo, NCCL's forms   | host        | yes                 |
|               |                           | and rules) / the same             |             |                     |
| cuda          | one process per GPU       | nccl / nccl                       | CUDA events | yes                 |
| cuda-emulated | several processes per GPU | host_staged (gloo, CUDA via host) | CUDA events | no (time-sliced GPU)|
|               |                           | / host_staged on CPU ranks        |             |                     |

Everything that differs between them is data in the `Placement` (devices, backend, clock, calibration
sizes, limits) and the `ExecutorInfo` (whether times mean anything, hardware fingerprint, topology):
no other module asks an executor for its name. The judge sees an executor only through interface.py.

This package is the judge's side of the processes; what runs inside a rank is pkb_env/ranks/, the
sandbox that holds it pkb_env/sandbox/, and the wire between them pkb_env/wire/.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass, replace

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
        raise ExecutorError(f"executor {name!r} needs a CUDA GPU and torch sees none; use executor='cpu'",
                            f"--executor {name} needs a CUDA GPU and torch sees none; use --executor cpu "
                            f"(`pkb-env show TASK --topology h200_8gpu --world-size 8` prints the prompt such a machine "
                            f"would get)")
    world_size_limit(name, gpus).check(world_size)
    return name


@dataclass(frozen=True)
class ExecutorPlan:
    """What an executor is, before anything starts: its info, its ranks' placement, the variables its ranks get
    beyond the scrubbed set, and where the trusted reference runs (None: beside the candidates)."""

    info: ExecutorInfo
    placement: Placement
    extra_env: dict[str, str] | None = None
    reference_placement: Placement | None = None


def make_executor(config: JudgeConfig) -> ProcessExecutor:
    """The executor `config` names, at its world size (checked against this machine first)."""
    plan = local_plan(config)
    return ProcessExecutor(plan.info, plan.placement, config, plan.extra_env, plan.reference_placement)


def local_plan(config: JudgeConfig) -> ExecutorPlan:
    """The plan of the executor `config` names on this machine (its world size checked against it first), starting
    nothing: what make_executor makes, and what `pkb-env topology` describes."""
    name = check_world_size(config.executor, config.world_size)
    if name == "cpu":
        return plan_executor(config, "cpu", 0, "", "cpu")
    from pkb_env.hardware import detect

    machine = detect()  # NVML: no CUDA context in the judge's process
    model = machine.gpus[0].name if machine.gpus else "unknown GPU"
    return plan_executor(config, name, gpu_count(), model, machine.topology_name if machine.gpus else "unknown_gpu")


def imagined_executor(config: JudgeConfig, topology: str, devices: int | None) -> ExecutorPlan:
    """The executor a machine with the board `topology` (`devices` GPUs; None: no GPU) would make for `config`, as
    make_executor would make it there: `auto` resolved by that board's GPU count, the world size checked against
    its limit. Nothing is detected or started: `pkb-env show --topology` builds the prompt of a machine that is
    not here from it (pkb_env/prompt.py, Hardware)."""
    world_size, name = config.world_size, config.executor
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ExecutorError(f"world_size must be a positive integer, got {world_size!r}")
    if not devices:
        if name not in ("auto", "cpu"):
            raise ExecutorError(f"topology {topology!r} has no GPUs: executor {name!r} cannot run there",
                                f"topology {topology!r} has no GPUs: pick a GPU board with --topology (h100_8gpu, "
                                f"h200_8gpu, b200_8gpu) or --executor cpu")
        return plan_executor(config, "cpu", 0, "", "cpu")
    if name == "cpu":
        raise ExecutorError(f"executor 'cpu' runs its ranks on CPU cores whatever the board: drop topology "
                            f"{topology!r} or pick executor 'cuda'",
                            f"--executor cpu runs its ranks on CPU cores whatever the board: drop --topology "
                            f"{topology}, or pick --executor cuda")
    if name == "auto":
        name = "cuda" if devices >= world_size else "cuda-emulated"
    world_size_limit(name, devices).check(world_size)
    return plan_executor(config, name, devices, topology, topology)


def plan_executor(config: JudgeConfig, name: str, gpus: int, model: str, topology: str) -> ExecutorPlan:
    """The plan of executor `name` (resolved) for `config` on a machine of `gpus` GPUs of `model`, whose board is
    the topology config `topology`."""
    world_size = config.world_size
    if name == "cpu":
        # Every rank gets gloo with NCCL's forms and rules of the collectives (ranks/host_staged.py; nothing is
        # staged on CPU ranks): plain gloo refuses forms NCCL takes, e.g. a stacked all_gather_into_tensor
        # output, and takes tensors NCCL refuses (non-contiguous ones). The trusted reference too, so that a
        # reference that would fail under NCCL fails here first, and both sides of a timed pair pay the same
        # Python call per operation.
        placement = replace(cpu_placement(world_size), backend=HOST_STAGED)
        return ExecutorPlan(ExecutorInfo("cpu", cpu_fingerprint(), True, "cpu"), placement)
    if name == "cuda":
        placement = Placement(tuple(f"cuda:{r}" for r in range(world_size)), "nccl", ResourceLimits(), clock="cuda",
                              calibration_sizes=GPU_CALIBRATION_SIZES, spares=len(START_PHASES) + 1,
                              cpus=rank_cores(world_size) if config.pin_ranks else None, symmetric=True)
        return ExecutorPlan(ExecutorInfo("cuda", f"cuda/{model}/x{world_size}", True, topology), placement)
    # gloo's transport with CUDA tensors staged through host memory (ranks/host_staged.py): plain gloo
    # aborts on a CUDA tensor's send/recv, and NCCL refuses two ranks on one GPU.
    placement = Placement(tuple(f"cuda:{r % gpus}" for r in range(world_size)), HOST_STAGED, ResourceLimits(),
                          clock="cuda", calibration_sizes=(1 << 20,))
    info = ExecutorInfo("cuda-emulated", f"cuda-emulated/{model}/{world_size}on{gpus}", False, topology)
    # Several ranks per GPU: torch symmetric memory refuses overlapping devices unless told otherwise, and
    # NCCL refuses two ranks on one GPU, so the (trusted) reference runs on CPU ranks over gloo, NCCL's rules
    # kept (as the cpu executor's).
    return ExecutorPlan(info, placement, {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"},
                        replace(cpu_placement(world_size), backend=HOST_STAGED))


def cpu_placement(world_size: int) -> Placement:
    limits = ResourceLimits(address_space_bytes=max(2 << 30, int(_total_memory() * 0.6 / world_size)))
    return Placement(tuple("cpu" for _ in range(world_size)), "gloo", limits, clock="host",
                     calibration_sizes=CPU_CALIBRATION_SIZES)


def _total_memory() -> int:
    import psutil

    return psutil.virtual_memory().total
