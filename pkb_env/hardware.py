"""What GPUs this machine has and how they are linked, read through NVML without creating a CUDA context.

The topology configs hold datasheet numbers for known boards; this module says which board (if any) we
are on and what the links between GPU pairs actually are (NVLink with its active link count, or a PCIe
path), so the prompt and the roofline describe the machine the candidate will run on.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

# Device nodes of a GPU driver (NVIDIA, WSL's, ROCm's): without any, no GPU is visible, and neither NVML nor
# torch (a second to import) need be asked.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_gib: float
    nvlinks: int                      # active NVLink links of this GPU


@dataclass(frozen=True)
class MachineInfo:
    gpus: tuple[GpuInfo, ...] = ()
    links: dict[tuple[int, int], str] = field(default_factory=dict)   # (i, j) -> "NV18" | "PCIe (...)"
    driver: str | None = None
    error: str | None = None          # why nothing could be read (no NVML, no GPU)

    @property
    def topology_name(self) -> str:
        """The configs/topologies entry for this machine ('cpu' without GPUs)."""
        if not self.gpus:
            return "cpu"
        name = self.gpus[0].name.lower()
        for board in ("h200", "h100", "b200"):
            if board in name:
                return f"{board}_8gpu"
        return "unknown_gpu"

    def describe(self) -> str:
        if not self.gpus:
            return f"no GPU found ({self.error})" if self.error else "no GPU found"
        lines = [f"{len(self.gpus)} x {self.gpus[0].name} ({self.gpus[0].memory_gib:.0f} GiB), driver {self.driver}"]
        for gpu in self.gpus:
            lines.append(f"  GPU {gpu.index}: {gpu.nvlinks} active NVLink links")
        for (i, j), kind in sorted(self.links.items()):
            lines.append(f"  GPU {i} <-> GPU {j}: {kind}")
        return "\n".join(lines)


_PCIE_LEVELS = {0: "same board", 10: "PCIe switch", 20: "PCIe switches", 30: "PCIe host bridge",
                40: "same CPU socket (NUMA node)", 50: "across CPU sockets"}


def detect() -> MachineInfo:
    if not any(os.path.exists(node) for node in GPU_DEVICE_NODES):
        return MachineInfo()  # no GPU driver here: nothing to install for NVML either
    try:
        import pynvml
    except ImportError:
        return MachineInfo(error="the nvidia-ml-py package (pynvml) is not installed: "
                                 "pip install 'pkb-env[cuda13]' (or [cuda12])")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return MachineInfo(error=f"NVML unavailable: {exc}")
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = tuple(GpuInfo(i, _text(pynvml.nvmlDeviceGetName(h)), pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30,
                             _nvlinks(pynvml, h)) for i, h in enumerate(handles))
        links = {}
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                links[(i, j)] = _link(pynvml, handles[i], handles[j])
        return MachineInfo(gpus, links, _text(pynvml.nvmlSystemGetDriverVersion()))
    finally:
        pynvml.nvmlShutdown()


def _nvlinks(pynvml, handle) -> int:
    active = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active += int(pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED)
        except Exception:  # links past the GPU's count, or no NVLink at all
            break
    return active


def _link(pynvml, a, b) -> str:
    try:
        status = pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        if status == pynvml.NVML_P2P_STATUS_OK:
            return "NVLink"
    except Exception:
        pass
    try:
        level = pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b)
        return f"PCIe ({_PCIE_LEVELS.get(int(level), f'level {int(level)}')})"
    except Exception as exc:
        return f"unknown ({exc})"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
