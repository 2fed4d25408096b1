"""PKB's `utils.parallelkittens_runtime`, as far as pkb-env can offer it.

PKB's helpers cache ThunderKittens `TKParallelTensor`s that the candidate's own extension exposes (VMM, IPC and,
by default, NVLink multicast), per (extension, shape, dtype, multicast), and an int32 barrier of BARRIER_ELEMS that
is always multicast. pkb-env never turns NVLink multicast on (docs/containment.md), so a multicast tensor or the
barrier is refused here with the reason; a non-multicast tensor is made as PKB's helper makes it. (Building a
ThunderKittens extension needs its headers, which pkb-env's build cells do not hold.)
"""
from __future__ import annotations

import torch
import torch.distributed as dist

NUM_DEVICES = 8
BARRIER_ELEMS = 64
_tensors: dict[tuple, object] = {}

MULTICAST = ("NVLink multicast is never turned on in pkb-env (NVLS stays off on its machines): use peer "
             "loads and stores through symmetric memory (multicast=False, or pkb_env.runtime.symmetric_buffer)")


def create_parallel_tensor(ext, shape, dtype: torch.dtype = torch.bfloat16, *, multicast: bool = True):
    """A TKParallelTensor of `ext` over the default group (every rank calls it at the same point)."""
    if multicast:
        raise RuntimeError(f"create_parallel_tensor(multicast=True): {MULTICAST}")
    return ext.TKParallelTensor([int(s) for s in shape], dtype, dist.get_rank(), dist.get_world_size(), False)


def get_or_create_parallel_tensor(ext, shape, dtype: torch.dtype = torch.bfloat16, *, multicast: bool = True):
    """`create_parallel_tensor`, cached per (extension, shape, dtype, multicast) across calls."""
    key = (id(ext), tuple(int(s) for s in shape), dtype, bool(multicast))
    if key not in _tensors:
        _tensors[key] = create_parallel_tensor(ext, shape, dtype, multicast=multicast)
    return _tensors[key]


def get_or_create_barrier(ext, *, num_devices: int = NUM_DEVICES):
    """PKB's barrier is a multicast tensor: refused (MULTICAST)."""
    raise RuntimeError(f"get_or_create_barrier: PKB's ParallelKittens barrier is a multicast tensor; {MULTICAST}")
