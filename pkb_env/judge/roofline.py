"""Roofline fraction from the alpha-beta model (docs/architecture.md §6), in nccl-tests vocabulary.

bound = alpha * latency_steps + bus_bytes / B, fraction = bound / measured, clipped to [0, 1]. With
alpha = 0 the fraction is busbw / B, the number a systems engineer reads off nccl-tests. It is reported
against the calibrated bandwidth and, where the topology has a datasheet figure, against that too.
"""
from __future__ import annotations

from pkb_env.record import RooflineResult
from pkb_env.task import Traffic
from pkb_env.topology import Calibration, Topology


def bound_seconds(traffic: Traffic, alpha_s: float, bandwidth_bytes_per_s: float) -> float:
    return alpha_s * traffic.latency_steps + traffic.bus_bytes / bandwidth_bytes_per_s


def roofline(traffic: Traffic, world_size: int, measured_s: float, topology: Topology,
             calibration: Calibration | None) -> RooflineResult | None:
    """None when nothing has to cross the interconnect (one rank) or no bandwidth is known."""
    if world_size < 2 or traffic.bus_bytes <= 0 or measured_s <= 0:
        return None
    spec_bw = topology.link_bandwidth_gbps * 1e9 if topology.link_bandwidth_gbps else None
    spec_alpha = topology.alpha_us * 1e-6 if topology.alpha_us is not None else None
    if calibration is not None:
        bandwidth, alpha, source = calibration.bandwidth_bytes_per_s, calibration.alpha_s, "calibrated"
    elif spec_bw is not None:
        bandwidth, alpha, source = spec_bw, spec_alpha or 0.0, "spec"
    else:
        return None
    bound = bound_seconds(traffic, alpha, bandwidth)
    spec_fraction = None
    if spec_bw is not None:
        spec_fraction = min(1.0, bound_seconds(traffic, spec_alpha if spec_alpha is not None else alpha,
                                               spec_bw) / measured_s)
    return RooflineResult(
        collective=traffic.collective, size_bytes=traffic.size_bytes, bus_bytes=traffic.bus_bytes,
        bound_s=bound, fraction=min(1.0, bound / measured_s),
        algbw_gbps=traffic.size_bytes / measured_s / 1e9, busbw_gbps=traffic.bus_bytes / measured_s / 1e9,
        bandwidth_gbps=bandwidth / 1e9, alpha_s=alpha, bandwidth_source=source, spec_fraction=spec_fraction)
