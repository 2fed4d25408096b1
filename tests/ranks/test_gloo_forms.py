"""Candidates on CPU ranks are judged on their algorithm, not on gloo's gaps (issue 42, item 4).

PKB's references, written for NCCL, use forms of the collectives that NCCL takes and plain gloo refuses: an
all_gather_into_tensor into a stacked (W, ...) output (PKB 2, 11, 26) or of a 0-dim tensor (61), an all_gather
into outputs of different sizes (35), an all_to_all of uneven lists (61, 62); a stacked reduce_scatter_tensor
input makes gloo abort the process. On CPU ranks an ordinary candidate using them got runtime_error. Candidates
there now get the host-staged group (pkb_env/ranks/host_staged.py, nothing staged on CPU ranks), which hands
gloo each of these in a form it takes; the reference's ranks keep plain gloo (tests/executors/test_placement.py).
The group's own scenarios, staged, are in tests/ranks/host_staged_ranks.py ("nccl_forms").
"""
from __future__ import annotations

import pytest

FORMS = {
    "stacked all_gather_into_tensor output (PKB 2)": ("all_gather", """
import torch, torch.distributed as dist
def solution(tensor):
    out = tensor.new_empty((dist.get_world_size(), *tensor.shape))
    dist.all_gather_into_tensor(out, tensor)
    return out
"""),
    "0-dim all_gather_into_tensor input (PKB 61)": ("ulysses_all_gather_variable", """
import torch, torch.distributed as dist
def solution(x, gather_dim, group):
    world = dist.get_world_size(group)
    block = x.movedim(gather_dim, 0)
    sizes = torch.empty(world, dtype=torch.int64, device=x.device)
    dist.all_gather_into_tensor(sizes, torch.tensor(block.shape[0], device=x.device), group=group)
    sizes = sizes.tolist()
    padded = block.new_zeros((max(sizes), *block.shape[1:]))
    padded[:block.shape[0]] = block
    gathered = block.new_empty((world, *padded.shape))
    dist.all_gather_into_tensor(gathered, padded, group=group)
    return torch.cat([gathered[i, :n] for i, n in enumerate(sizes)]).movedim(0, gather_dim)
"""),
    "all_gather into outputs of different sizes (PKB 35)": ("ulysses_all_gather_variable", """
import torch, torch.distributed as dist
def solution(x, gather_dim, group):
    world = dist.get_world_size(group)
    x = x.contiguous()
    size = torch.tensor(x.size(), dtype=torch.int64, device=x.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    parts = [x.new_empty(torch.Size(s.tolist())) for s in sizes]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts, dim=gather_dim)
"""),
    "stacked reduce_scatter_tensor input": ("reduce_scatter", """
import torch, torch.distributed as dist
def solution(tensor):
    world = dist.get_world_size()
    out = tensor.new_empty((tensor.shape[0] // world, *tensor.shape[1:]))
    dist.reduce_scatter_tensor(out, tensor.view(world, *out.shape))
    return out
"""),
    "all_to_all of uneven lists (PKB 61, 62)": ("moe_all2all_primitive", """
import torch, torch.distributed as dist
def solution(local_tensor, input_split_sizes, output_split_sizes, group):
    send, recv = input_split_sizes.tolist(), output_split_sizes.tolist()
    received = [local_tensor.new_empty((n, local_tensor.shape[1])) for n in recv]
    dist.all_to_all(received, list(local_tensor.split(send)), group=group)
    return torch.cat(received)
"""),
}

MISMATCHED = """
import torch, torch.distributed as dist
def solution(tensor):
    out = tensor.new_empty((tensor.shape[0] // dist.get_world_size() + 1, *tensor.shape[1:]))
    dist.reduce_scatter_tensor(out, tensor)
    return out
"""


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_candidate_using_a_form_nccl_takes_is_correct_on_cpu_ranks(verdicts4, form):
    task, code = FORMS[form]
    record = verdicts4.judge(task, code)
    assert record.verdict.value == "correct", record.feedback


def test_sizes_nccl_refuses_are_a_runtime_error_naming_them_not_a_crash(verdicts4):
    """gloo's reduce-scatter aborts its process on sizes that do not fit; NCCL raises, and so does the group."""
    record = verdicts4.judge("reduce_scatter", MISMATCHED)
    assert record.verdict.value == "runtime_error", record.feedback
    assert "must hold the world size times the output's" in record.feedback, record.feedback
