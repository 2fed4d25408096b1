"""Symmetric memory for candidates: one buffer per rank, every rank's buffer mapped into every rank.

Built on torch.distributed._symmetric_memory (CUDA backend). A SymmetricBuffer gives:
  local             this rank's buffer, as a tensor
  peer(r)           rank r's buffer as a tensor in this process (torch ops on it read/write over NVLink;
                    `copy_` to or from it uses the copy engine)
  ptrs              an int64 CUDA tensor of every rank's buffer address, for kernels (pass it as a pointer)
  signal_pad_ptrs   the same for the signal pads (see SIGNAL_PAD_CUDA for in-kernel barriers)
  barrier()         a stream-ordered barrier across ranks (a signal-pad kernel on the current stream)

Allocation and rendezvous are collective and slow (they exchange memory handles), so buffers are made
once and reused across calls: `symmetric_buffer` caches them by (shape, dtype, tag, group). Reusing a
buffer across calls means a fast rank can overwrite its buffer while a slow peer still reads it: put a
barrier after the last remote read of a call (the pattern in this package's docstring).

The first allocation in a process used to cost seconds: not NVSHMEM, but the hundreds of Python modules it
imports (torch.fx.experimental.symbolic_shapes and sympy), compiled from source in rank processes that write no
.pyc. The zygote imports them once before it forks (pkb_env/sandbox/zygote.py), so a rank's first allocation
takes milliseconds (`benchmarks/symmetric_setup_cost.py`;
docs/measurements/2026-12-02-symmetric-memory-and-throughput-h200.md).
"""
from __future__ import annotations

from functools import cached_property

import torch
import torch.distributed as dist

_buffers: dict[tuple, "SymmetricBuffer"] = {}


class SymmetricBuffer:
    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, group: dist.ProcessGroup | None = None):
        import torch.distributed._symmetric_memory as symm_mem

        self.group = group or dist.group.WORLD
        self.shape, self.dtype = tuple(shape), dtype
        self.local = symm_mem.empty(self.shape, dtype=dtype, device=torch.device("cuda", torch.cuda.current_device()))
        self.handle = symm_mem.rendezvous(self.local, self.group)
        self.rank, self.world_size = self.handle.rank, self.handle.world_size

    def peer(self, rank: int) -> torch.Tensor:
        return self.handle.get_buffer(rank, list(self.shape), self.dtype)

    @cached_property
    def ptrs(self) -> torch.Tensor:
        return torch.tensor(list(self.handle.buffer_ptrs), dtype=torch.int64, device=self.local.device)

    @cached_property
    def signal_pad_ptrs(self) -> torch.Tensor:
        return torch.tensor(list(self.handle.signal_pad_ptrs), dtype=torch.int64, device=self.local.device)

    def barrier(self, channel: int = 0) -> None:
        self.handle.barrier(channel=channel)


def symmetric_buffer(shape: tuple[int, ...] | int, dtype: torch.dtype, tag: str = "default",
                     group: dist.ProcessGroup | None = None) -> SymmetricBuffer:
    """The cached SymmetricBuffer for this (shape, dtype, tag, group); created collectively on first use."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    key = (shape, dtype, tag, id(group))
    if key not in _buffers:
        _buffers[key] = SymmetricBuffer(shape, dtype, group)
    return _buffers[key]
