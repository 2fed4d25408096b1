"""Symmetric memory on a mesh's subgroups, on GPU ranks: what no expert does and what model-written code asks for.

Two of GPT-5.5's PKB files (ring_attention_tp, ring_attention_pp) stopped inside `symm_mem.rendezvous` on a mesh
subgroup on 4 emulated ranks of one H100 and were cut at the trial timeout (docs/known_holes.md, "Emulated
ranks"). Here the task's own reference, preceded by a rendezvous of a symmetric buffer on each of its groups,
must be judged correct: a hang is the judge's (or torch's) failure on this path, not the code's.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pkb_env import JudgeConfig
from pkb_env.client import LocalClient

REFERENCE = Path(__file__).resolve().parents[2] / "tasks" / "ring_attention_tp" / "reference.py"
RENDEZVOUS = '''
    import torch.distributed._symmetric_memory as symm_mem
    for group in (tp_group, cp_group):
        buffer = symm_mem.empty((1024,), device=h.device, dtype=h.dtype)
        handle = symm_mem.rendezvous(buffer, group)
        assert len(handle.buffer_ptrs) == dist.get_world_size(group)
'''


def candidate() -> str:
    """ring_attention_tp's reference, its body preceded by a rendezvous on each of its two groups."""
    source = REFERENCE.read_text()
    signature = "def solution(h, w_qkv, w_o, num_heads, scale, causal, tp_group, cp_group):\n"
    head, body = source.split(signature)
    docstring_end = body.index('"""', body.index('"""') + 3) + 3   # after the function's docstring
    return head + signature + body[:docstring_end] + "\n" + RENDEZVOUS + body[docstring_end:]


@pytest.mark.parametrize("executor,world_size", [("cuda-emulated", 4)])
def test_a_rendezvous_on_each_mesh_subgroup_does_not_hang(executor, world_size):
    config = JudgeConfig(executor=executor, world_size=world_size, preset="tiny", timing=False, trials=1)
    with LocalClient(config) as client:
        record = client.submit("ring_attention_tp", candidate()).result()
    assert record.verdict.value == "correct", record.feedback
