"""Probes of the machine's peaks as a rank runs them, in the trusted reference ranks during a calibration.

Which probes a calibration times, and what their times mean, is the judge's side (judge/calibration.py);
here each `ProbeWorkload` (wire/requests.py) becomes a call and its arguments on this rank. Ranks a
probe does not involve call a no-op, so that every rank takes part in the burst.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from pkb_env.wire.requests import ProbeWorkload


def probe(spec: ProbeWorkload, device: torch.device, rank: int) -> tuple[Callable[..., Any], tuple]:
    """(call, arguments) of one probe on this rank."""
    name = spec.probe
    if name == "sendrecv":
        def sendrecv(buf: torch.Tensor) -> None:
            if rank == 0:
                dist.send(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)
        return sendrecv, (torch.zeros(max(1, spec.bytes // 4), device=device),)
    if name == "matmul":
        n, dtype = spec.n, getattr(torch, spec.dtype)
        a = torch.randn(n, n, device=device).to(dtype)
        return _on_rank0(torch.matmul, rank), (a, torch.randn(n, n, device=device).to(dtype))
    if name == "copy":
        src = torch.empty(spec.bytes, dtype=torch.uint8, device=device).fill_(1)
        return _on_rank0(torch.empty_like(src).copy_, rank), (src,)
    raise ValueError(f"no probe {name!r}")  # ProbeWorkload admits only the three above


def _on_rank0(fn: Callable[..., Any], rank: int) -> Callable[..., Any]:
    return (lambda *args: fn(*args)) if rank == 0 else (lambda *args: None)
