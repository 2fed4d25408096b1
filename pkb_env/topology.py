"""Hardware topology: datasheet figures from configs/topologies/, calibrated figures measured here.

The roofline needs a per-rank one-way bandwidth B and a fixed latency alpha. Datasheets give B for GPU
boards; a calibration (`pkb-env calibrate`, or automatically on first use) measures both on the actual
machine with the judge's own timing loop, and is cached per hardware fingerprint and world size.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import yaml

from pkb_env.cache import cache_root


@dataclass(frozen=True)
class Topology:
    name: str
    description: str
    interconnect: str
    devices_per_node: int | None
    link_bandwidth_gbps: float | None
    alpha_us: float | None
    engines: tuple[str, ...]
    multicast: bool
    sources: tuple[str, ...]

    def describe(self, world_size: int, executor: str, calibration: "Calibration | None") -> str:
        """The topology paragraph of the prompt."""
        lines = [f"Executor: {executor}, world size {world_size}.",
                 f"Hardware: {self.description}.",
                 f"Interconnect: {self.interconnect}."]
        if self.link_bandwidth_gbps:
            lines.append(f"Datasheet bandwidth: {self.link_bandwidth_gbps:g} GB/s per rank per direction.")
        if calibration is not None:
            lines.append(f"Measured here: bus bandwidth {calibration.bandwidth_gbps:.2f} GB/s, "
                         f"small-message latency {calibration.alpha_s * 1e6:.1f} us.")
        if self.engines:
            lines.append("Data-movement engines: " + "; ".join(self.engines) + ".")
        lines.append("NVLink multicast (NVLS/multimem): " + ("available." if self.multicast else "not available."))
        return "\n".join(lines)


def load_topology(name: str) -> Topology:
    package = resources.files("pkb_env.configs.topologies")
    path = package / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.name[:-5] for p in package.iterdir() if p.name.endswith(".yaml"))
        raise ValueError(f"unknown topology {name!r}; known: {', '.join(known)}")
    data = yaml.safe_load(path.read_text())
    data["engines"] = tuple(data.get("engines") or ())
    data["sources"] = tuple(data.get("sources") or ())
    return Topology(**data)


@dataclass(frozen=True)
class Calibration:
    hardware: str
    world_size: int
    alpha_s: float                 # a 4-byte all_reduce, by the executor's timing statistic
    bandwidth_gbps: float          # best measured all_reduce bus bandwidth (nccl-tests busbw), GB/s
    measured_at: float
    busbw_by_size: tuple[tuple[int, float], ...] = ()
    peer_copy_gbps: tuple[tuple[int, int, float], ...] = ()   # (src GPU, dst GPU, copy-engine GB/s)
    statistic: str = "median"      # the timing statistic alpha and B were measured with

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9


def cache_dir() -> Path:
    return cache_root() / "calibration"


def calibration_path(hardware: str, world_size: int, statistic: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", hardware)
    return cache_dir() / f"{slug}-ws{world_size}-{statistic}.json"


def load_calibration(hardware: str, world_size: int, statistic: str) -> Calibration | None:
    try:
        data = json.loads(calibration_path(hardware, world_size, statistic).read_text())
        data["busbw_by_size"] = tuple(tuple(x) for x in data.get("busbw_by_size", ()))
        data["peer_copy_gbps"] = tuple(tuple(x) for x in data.get("peer_copy_gbps", ()))
        return Calibration(**data)
    except (OSError, ValueError, TypeError):
        return None


def save_calibration(cal: Calibration) -> Path:
    path = calibration_path(cal.hardware, cal.world_size, cal.statistic)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cal), indent=2))
    tmp.replace(path)
    return path


def calibration_from_measurement(hardware: str, world_size: int, result: dict, statistic: str) -> Calibration:
    busbw = tuple((int(size), float(bw) / 1e9) for size, bw in result["busbw"])
    peers = tuple((int(a), int(b), float(bw)) for a, b, bw in result.get("peers", ()))
    return Calibration(hardware, world_size, float(result["latency_s"]), max(bw for _, bw in busbw),
                       time.time(), busbw, peers, statistic)
