"""The calibration: the machine's latency, bandwidth and peaks, measured by the timing protocol itself
(docs/architecture.md, "Timing and roofline"). Run by the service at open or on request, never inside a step.

The roofline is a lower bound on any code's time only if every peak it uses is at least what code can
reach on this machine. So each figure is the best of several probes, each timed by the judge's own
burst protocol (the clock candidates are timed with), in the trusted reference ranks, nccl-tests' way
(one buffer, no fingerprints), and each probe's time is its fastest burst, not the median of its bursts: a
candidate's time is a median over bursts taken later, perhaps on a quieter machine, and on shared CPU ranks
a median-of-bursts calibration taken under load was beaten by the reference itself (a roofline fraction of
1.04-1.19 for scatter and broadcast in whole-suite runs; docs/known_holes.md):
* latency: a 4-byte all_reduce, and a 4-byte send/recv between ranks 0 and 1 (a broadcast or a p2p step
  can beat an all_reduce's latency);
* bandwidth: all_reduce bus bandwidth at the placement's sizes, and a large send/recv (one-way bytes/s);
* matmul: square matmuls of several sizes per dtype on rank 0 alone (on CPU ranks the others would share
  its cores; a lone rank is the fastest any rank can be);
* device copy: `dst.copy_(src)` of a few sizes on rank 0, counting bytes read plus written (what a task's
  HBM bytes count). Small sizes are included on CPU ranks, whose tiny inputs live in cache;
* on GPUs, the copy-engine rate between every pair of GPUs.
How a rank runs each probe is ranks/probes.py.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from pkb_env.contract import FLAT
from pkb_env.executors.interface import Executor, ReferenceSession
from pkb_env.config import TimingProtocol
from pkb_env.judge.seeds import SeedPlan
from pkb_env.judge.timing import CallLimits, TimedWork, run_bursts
from pkb_env.topology import Calibration, calibration_from_measurement
from pkb_env.wire.requests import CollectiveWorkload, ProbeWorkload, Workload

MATMUL = {"cpu": {"float32": (128, 256, 512)}, "cuda": {"bfloat16": (4096, 8192), "float32": (4096,)}}
COPY_BYTES = {"cpu": (256 << 10, 32 << 20), "cuda": (256 << 20,)}


def probes(gpu: bool, bandwidth_bytes: int) -> list[ProbeWorkload]:
    """The probe workloads of a calibration, each timed by bursts on every rank of the reference ranks."""
    kind = "cuda" if gpu else "cpu"
    out = [ProbeWorkload("sendrecv", bytes=4), ProbeWorkload("sendrecv", bytes=bandwidth_bytes)]
    out += [ProbeWorkload("matmul", dtype=dtype, n=n) for dtype, sizes in MATMUL[kind].items() for n in sizes]
    out += [ProbeWorkload("copy", bytes=size) for size in COPY_BYTES[kind]]
    return out


def calibrate(executor: Executor, protocol: TimingProtocol, sizes: tuple[int, ...]) -> Calibration:
    """Measure this machine at the executor's world size (the module docstring); JudgeError if the reference
    ranks cannot run it."""
    world = executor.world_size
    gpu = executor.reference_placement.gpu
    # Short and few bursts per probe: large all_reduces on CPU ranks take tens of ms, and a calibration
    # runs a dozen probes.
    quick = replace(protocol, min_calls=2, min_bursts=3, warmup_bursts=0, burst_s=protocol.burst_s / 2)
    plan = SeedPlan(FLAT.resolve(world))

    def measure(ranks: ReferenceSession) -> dict[str, Any]:
        def per_call(workload: Workload) -> float:
            log = run_bursts(ranks, TimedWork(workload, plan), quick, CallLimits(quick.max_calls),
                             quick.calibration_budget_s)
            return float(np.min(log.figures()))

        factor = 2 * (world - 1) / world
        result: dict[str, Any] = {"latency_s": per_call(CollectiveWorkload("all_reduce", 4)), "busbw": []}
        for size in sizes:
            result["busbw"].append([size, factor * size / per_call(CollectiveWorkload("all_reduce", size))])
        result["peaks"] = peaks_from([(w, per_call(w)) for w in probes(gpu, sizes[-1])])
        if gpu:
            result["peers"] = ranks.copy_rates(sizes[-1])
        return result

    result = executor.reference(None, measure)
    return calibration_from_measurement(executor.info.hardware, world, result, protocol.statistic)


def peaks_from(seconds: list[tuple[ProbeWorkload, float]]) -> dict[str, Any]:
    """{latency_s: {probe: s}, bandwidth: {probe: bytes/s}, matmul_flops: {dtype: FLOP/s}, copy_bytes_per_s}
    from (probe, seconds per call) pairs: the best of each kind."""
    out: dict[str, Any] = {"latency_s": {}, "bandwidth": {}, "matmul_flops": {}}
    copies = []
    for spec, s in seconds:
        if spec.probe == "sendrecv" and spec.bytes <= 4:
            out["latency_s"]["sendrecv"] = s
        elif spec.probe == "sendrecv":
            out["bandwidth"]["sendrecv"] = spec.bytes / s
        elif spec.probe == "matmul":
            rate = 2 * spec.n ** 3 / s
            out["matmul_flops"][spec.dtype] = max(rate, out["matmul_flops"].get(spec.dtype, 0.0))
        else:
            copies.append(2 * spec.bytes / s)
    out["copy_bytes_per_s"] = max(copies)
    return out
