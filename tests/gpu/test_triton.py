"""Triton kernels work in candidates: JIT-compiled inside the rank (per-step cache), on plain and on
symmetric-memory peer tensors."""
import gymnasium
import pytest

import pkb_env  # noqa: F401

TRITON_ALL_REDUCE = '''
import torch
import triton
import triton.language as tl
from pkb_env.runtime import symmetric_buffer


@triton.jit
def _accumulate(acc_ptr, src_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(acc_ptr + offs, mask=mask).to(tl.float32)
    src = tl.load(src_ptr + offs, mask=mask).to(tl.float32)
    tl.store(acc_ptr + offs, (acc + src).to(acc_ptr.dtype.element_ty), mask=mask)


def solution(tensor):
    buf = symmetric_buffer(tuple(tensor.shape), tensor.dtype, tag="triton")
    buf.local.copy_(tensor)
    buf.barrier()
    out = tensor.clone()
    n = tensor.numel()
    for peer in range(buf.world_size):
        if peer != buf.rank:   # a peer's buffer, read over NVLink (here: the same GPU) by a Triton kernel
            _accumulate[(triton.cdiv(n, 1024),)](out, buf.peer(peer), n, BLOCK=1024)
    buf.barrier()
    return out
'''


@pytest.mark.parametrize("executor, world_size", [("cuda", 1), ("cuda-emulated", 2)])
def test_triton_candidate(executor, world_size):
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=world_size, executor=executor,
                         preset="bench", dtype="float32")
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step(TRITON_ALL_REDUCE)
        assert info["correct"], info["feedback"]
    finally:
        env.close()
