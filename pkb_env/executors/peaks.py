"""Rank-side probes of the machine's peaks, run in the trusted reference generation during calibration.

The roofline is a lower bound on any code's time only if every peak it uses is at least what code can
reach on this machine. So each figure is the best of several probes, each timed with the judge's own
barrier-aligned loop and statistic (the same clock candidates are timed with):
* latency: a 4-byte send/recv between ranks 0 and 1 (a broadcast or a p2p step can beat an all_reduce's
  latency, which is also measured, in rank.py);
* bandwidth: a large send/recv (one-way bytes per second), beside the all_reduce bus bandwidth;
* matmul: square matmuls of several sizes per dtype on rank 0 alone (on CPU ranks the others would share
  its cores; a lone rank is the fastest any rank can be);
* device copy: `dst.copy_(src)` of a few sizes on rank 0, counting bytes read plus written (what a task's
  HBM bytes count). Small sizes are included on CPU ranks, whose tiny inputs live in cache.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

Run = Callable[[Callable[..., Any], tuple], float]   # time one barrier-aligned call of fn(*args) on this rank

MATMUL = {"cpu": {"float32": (128, 256, 512)}, "cuda": {"bfloat16": (4096, 8192), "float32": (4096,)}}
COPY_BYTES = {"cpu": (256 << 10, 32 << 20), "cuda": (256 << 20,)}
LATENCY_REPS, RATE_REPS = 30, 5


def measure_peaks(run: Run, pick: Callable[[list[float]], float], slowest: Callable[[float], float],
                  device: torch.device, rank: int, bandwidth_bytes: int) -> dict[str, Any]:
    """{latency_s: {probe: s}, bandwidth: {probe: bytes/s}, matmul_flops: {dtype: FLOP/s},
    copy_bytes_per_s: bytes/s}. Every rank must call this (the probes are collective in their timing)."""
    kind = "cuda" if device.type == "cuda" else "cpu"

    def timed(fn: Callable[..., Any], args: tuple, reps: int) -> float:
        run(fn, args)  # warm-up: first-touch, allocator, kernel selection
        return slowest(pick([run(fn, args) for _ in range(reps)]))

    def sendrecv(buf: torch.Tensor) -> None:
        if rank == 0:
            dist.send(buf, 1)
        elif rank == 1:
            dist.recv(buf, 0)

    out: dict[str, Any] = {"latency_s": {}, "bandwidth": {}, "matmul_flops": {}}
    out["latency_s"]["sendrecv"] = timed(sendrecv, (torch.zeros(1, device=device),), LATENCY_REPS)
    big = torch.zeros(bandwidth_bytes // 4, device=device)
    out["bandwidth"]["sendrecv"] = bandwidth_bytes / timed(sendrecv, (big,), RATE_REPS)
    del big

    def on_rank0(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args: fn(*args) if rank == 0 else None

    for dtype_name, sizes in MATMUL[kind].items():
        dtype = getattr(torch, dtype_name)
        rates = []
        for n in sizes:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            rates.append(2 * n ** 3 / timed(on_rank0(torch.matmul), (a, b), RATE_REPS))
        out["matmul_flops"][dtype_name] = max(rates)
    rates = []
    for size in COPY_BYTES[kind]:
        src = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        rates.append(2 * size / timed(on_rank0(dst.copy_), (src,), RATE_REPS))
    out["copy_bytes_per_s"] = max(rates)
    return out
