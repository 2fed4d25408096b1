"""Rank-side probes of the machine's peaks, run in the trusted reference generation during calibration.

The roofline is a lower bound on any code's time only if every peak it uses is at least what code can
reach on this machine. So each figure is the best of several probes, each timed by the judge's own
burst protocol (pkb_env/judge/timing.py: the same clock candidates are timed with):
* latency: a 4-byte send/recv between ranks 0 and 1 (a broadcast or a p2p step can beat an all_reduce's
  latency, which is also measured, in pipeline.py's calibration);
* bandwidth: a large send/recv (one-way bytes per second), beside the all_reduce bus bandwidth;
* matmul: square matmuls of several sizes per dtype on rank 0 alone (on CPU ranks the others would share
  its cores; a lone rank is the fastest any rank can be);
* device copy: `dst.copy_(src)` of a few sizes on rank 0, counting bytes read plus written (what a task's
  HBM bytes count). Small sizes are included on CPU ranks, whose tiny inputs live in cache.

`probes` lists them as workloads for the judge's bursts, `probe` builds one in a rank, `peaks_from`
turns the judge's per-call times into rates.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

MATMUL = {"cpu": {"float32": (128, 256, 512)}, "cuda": {"bfloat16": (4096, 8192), "float32": (4096,)}}
COPY_BYTES = {"cpu": (256 << 10, 32 << 20), "cuda": (256 << 20,)}


def probes(gpu: bool, bandwidth_bytes: int) -> list[dict[str, Any]]:
    """The probe workloads of a calibration, each timed by bursts on every rank of the reference generation."""
    kind = "cuda" if gpu else "cpu"
    out: list[dict[str, Any]] = [{"probe": "sendrecv", "bytes": 4}, {"probe": "sendrecv", "bytes": bandwidth_bytes}]
    out += [{"probe": "matmul", "dtype": dtype, "n": n} for dtype, sizes in MATMUL[kind].items() for n in sizes]
    out += [{"probe": "copy", "bytes": size} for size in COPY_BYTES[kind]]
    return out


def probe(spec: dict[str, Any], device: torch.device, rank: int) -> tuple[Callable[..., Any], tuple]:
    """(call, arguments) of one probe on this rank; ranks a probe does not involve call a no-op."""
    name = spec["probe"]
    if name == "sendrecv":
        def sendrecv(buf: torch.Tensor) -> None:
            if rank == 0:
                dist.send(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)
        return sendrecv, (torch.zeros(max(1, spec["bytes"] // 4), device=device),)
    if name == "matmul":
        n, dtype = spec["n"], getattr(torch, spec["dtype"])
        a = torch.randn(n, n, device=device).to(dtype)
        return _on_rank0(torch.matmul, rank), (a, torch.randn(n, n, device=device).to(dtype))
    if name == "copy":
        src = torch.empty(spec["bytes"], dtype=torch.uint8, device=device).fill_(1)
        return _on_rank0(torch.empty_like(src).copy_, rank), (src,)
    raise ValueError(f"no probe {name!r}")


def _on_rank0(fn: Callable[..., Any], rank: int) -> Callable[..., Any]:
    return (lambda *args: fn(*args)) if rank == 0 else (lambda *args: None)


def peaks_from(seconds: list[tuple[dict[str, Any], float]]) -> dict[str, Any]:
    """{latency_s: {probe: s}, bandwidth: {probe: bytes/s}, matmul_flops: {dtype: FLOP/s}, copy_bytes_per_s}
    from (probe, seconds per call) pairs: the best of each kind."""
    out: dict[str, Any] = {"latency_s": {}, "bandwidth": {}, "matmul_flops": {}}
    copies = []
    for spec, s in seconds:
        if spec["probe"] == "sendrecv" and spec["bytes"] <= 4:
            out["latency_s"]["sendrecv"] = s
        elif spec["probe"] == "sendrecv":
            out["bandwidth"]["sendrecv"] = spec["bytes"] / s
        elif spec["probe"] == "matmul":
            rate = 2 * spec["n"] ** 3 / s
            out["matmul_flops"][spec["dtype"]] = max(rate, out["matmul_flops"].get(spec["dtype"], 0.0))
        else:
            copies.append(2 * spec["bytes"] / s)
    out["copy_bytes_per_s"] = max(copies)
    return out
