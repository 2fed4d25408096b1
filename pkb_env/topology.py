"""Hardware topology: datasheet figures from configs/topologies/, calibrated figures measured here.

The roofline (pkb_env/contract/cost.py) needs per-rank peaks: one-way link bandwidth B, a fixed latency
alpha, FLOP/s per dtype (matmul on tensor cores where the dtype has them, vector work), and HBM
bandwidth. Datasheets give them for GPU boards (with sources in the YAML). A calibration (`pkb-env
calibrate`, or a JudgeService at its first open: JudgeConfig.calibration) measures them on the actual
machine with the judge's own timing loop, in the trusted reference rank set, and is cached per hardware
fingerprint and world size.
Calibrated figures are best-observed values (the smallest latency, the largest bandwidth and rates of
several probes), so that the bound stays a lower bound on any code's time; CPU ranks have only these.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:   # the contract imports torch; the command line reads topologies without it (topology_names)
    from pkb_env.contract import Peaks


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
    matmul_tflops: dict[str, float] = field(default_factory=dict)   # dense, per dtype (no 2:4 sparsity)
    vector_tflops: dict[str, float] = field(default_factory=dict)   # non-tensor-core FMA rate, per dtype
    hbm_gbps: float | None = None

    def datasheet_peaks(self) -> "Peaks | None":
        """The board's datasheet figures, or None where there is no datasheet (CPU ranks, unknown GPUs)."""
        from pkb_env.contract import Peaks

        if not (self.link_bandwidth_gbps or self.matmul_tflops or self.hbm_gbps):
            return None
        return Peaks("datasheet", self.link_bandwidth_gbps, self.alpha_us * 1e-6 if self.alpha_us is not None else None,
                     dict(self.matmul_tflops), dict(self.vector_tflops), self.hbm_gbps)

    def peaks(self, calibration: "Calibration | None") -> "Peaks | None":
        """Calibrated figures where measured, datasheet figures elsewhere; None when neither exists."""
        from pkb_env.contract import Peaks

        sheet = self.datasheet_peaks()
        if calibration is None:
            return sheet
        base = sheet or Peaks("datasheet")
        return Peaks("calibrated", calibration.bandwidth_gbps, calibration.alpha_s,
                     {**base.matmul_tflops, **dict(calibration.matmul_tflops)}, dict(base.vector_tflops),
                     calibration.copy_gbps or base.hbm_gbps)

    def describe(self, world_size: int, executor: str, calibration: "Calibration | None") -> str:
        """The topology paragraph of the prompt."""
        lines = [f"Executor: {executor}, world size {world_size}.",
                 f"Hardware: {self.description}.",
                 f"Interconnect: {self.interconnect}."]
        if self.link_bandwidth_gbps:
            lines.append(f"Datasheet bandwidth: {self.link_bandwidth_gbps:g} GB/s per rank per direction.")
        if self.matmul_tflops:
            rates = ", ".join(f"{k} {v:g}" for k, v in self.matmul_tflops.items())
            hbm = f"; HBM {self.hbm_gbps:g} GB/s" if self.hbm_gbps else ""
            lines.append(f"Datasheet dense matmul TFLOP/s per GPU: {rates}{hbm}.")
        if calibration is not None:
            rates = ", ".join(f"{k} {v:.3g}" for k, v in calibration.matmul_tflops)
            lines.append(f"Measured here: bus bandwidth {calibration.bandwidth_gbps:.3g} GB/s, "
                         f"small-message latency {calibration.alpha_s * 1e6:.1f} us"
                         + (f", matmul TFLOP/s {rates}" if rates else "")
                         + (f", device copy {calibration.copy_gbps:.3g} GB/s" if calibration.copy_gbps else "")
                         + ".")
        if self.engines:
            lines.append("Data-movement engines: " + "; ".join(self.engines) + ".")
        lines.append("NVLink multicast (NVLS/multimem): " + ("available." if self.multicast else "not available."))
        return "\n".join(lines)


def topology_names() -> list[str]:
    """The shipped topology configs (configs/topologies/*.yaml), by name."""
    package = resources.files("pkb_env.configs.topologies")
    return sorted(p.name[:-5] for p in package.iterdir() if p.name.endswith(".yaml"))


def load_topology(name: str) -> Topology:
    path = resources.files("pkb_env.configs.topologies") / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown topology {name!r}; known: {', '.join(topology_names())}")
    data = yaml.safe_load(path.read_text())
    data["engines"] = tuple(data.get("engines") or ())
    data["sources"] = tuple(data.get("sources") or ())
    peaks = data.pop("peaks", None) or {}
    return Topology(**data, matmul_tflops=dict(peaks.get("matmul_tflops") or {}),
                    vector_tflops=dict(peaks.get("vector_tflops") or {}), hbm_gbps=peaks.get("hbm_gbps"))


CALIBRATION_VERSION = 3  # bump when the measured figures change meaning; older cache files are re-measured


@dataclass(frozen=True)
class Calibration:
    hardware: str
    world_size: int
    alpha_s: float                 # smallest latency of a 4-byte all_reduce and a 4-byte send/recv
    bandwidth_gbps: float          # largest of the all_reduce busbw and the send/recv bandwidth, GB/s
    measured_at: float
    busbw_by_size: tuple[tuple[int, float], ...] = ()
    peer_copy_gbps: tuple[tuple[int, int, float], ...] = ()   # (src GPU, dst GPU, copy-engine GB/s)
    statistic: str = "median"      # the timing statistic alpha and B were measured with
    matmul_tflops: tuple[tuple[str, float], ...] = ()         # (dtype, best large-matmul TFLOP/s of one rank)
    copy_gbps: float | None = None  # best device copy rate, bytes read + written per second / 1e9
    probes: tuple[tuple[str, float], ...] = ()                # every latency (s) and bandwidth (GB/s) probe
    version: int = CALIBRATION_VERSION


def calibration_path(cache: str | Path, hardware: str, world_size: int, statistic: str) -> Path:
    """Where the calibration of `hardware` at `world_size` lives under the judge's cache (JudgeConfig.cache_dir)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", hardware)
    return Path(cache) / "calibration" / f"{slug}-ws{world_size}-{statistic}.json"


def load_calibration(cache: str | Path, hardware: str, world_size: int, statistic: str) -> Calibration | None:
    try:
        data = json.loads(calibration_path(cache, hardware, world_size, statistic).read_text())
        if data.get("version") != CALIBRATION_VERSION:
            return None
        for key in ("busbw_by_size", "peer_copy_gbps", "matmul_tflops", "probes"):
            data[key] = tuple(tuple(x) for x in data.get(key, ()))
        return Calibration(**data)
    except (OSError, ValueError, TypeError):
        return None


def save_calibration(cache: str | Path, cal: Calibration) -> Path:
    path = calibration_path(cache, cal.hardware, cal.world_size, cal.statistic)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cal), indent=2))
    tmp.replace(path)
    return path


def calibration_from_measurement(hardware: str, world_size: int, result: dict, statistic: str) -> Calibration:
    """Best-observed figures: the smallest latency and the largest bandwidth over the probes, so that the
    roofline stays a lower bound whatever pattern a task uses (a broadcast beats an all_reduce's latency)."""
    busbw = tuple((int(size), float(bw) / 1e9) for size, bw in result["busbw"])
    peers = tuple((int(a), int(b), float(bw)) for a, b, bw in result.get("peers", ()))
    peaks = result.get("peaks", {})
    latencies = [float(result["latency_s"])] + [float(v) for k, v in peaks.get("latency_s", {}).items()]
    bandwidths = [bw for _, bw in busbw] + [float(v) / 1e9 for v in peaks.get("bandwidth", {}).values()]
    probes = (("all_reduce latency_s", float(result["latency_s"])),
              *((f"{k} latency_s", float(v)) for k, v in peaks.get("latency_s", {}).items()),
              *((f"{k} GB/s", float(v) / 1e9) for k, v in peaks.get("bandwidth", {}).items()))
    matmul = tuple((str(k), float(v) / 1e12) for k, v in peaks.get("matmul_flops", {}).items())
    copy = float(peaks["copy_bytes_per_s"]) / 1e9 if peaks.get("copy_bytes_per_s") else None
    return Calibration(hardware, world_size, min(latencies), max(bandwidths), time.time(), busbw, peers, statistic,
                       matmul, copy, probes)
