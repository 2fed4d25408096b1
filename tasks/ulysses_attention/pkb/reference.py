import torch
import torch.distributed as dist


def solution(h, w_qkv, w_o, group, num_heads, causal):
    """PKB 39 as PKB states it (tasks/ulysses_attention/pkb/spec.py): PKB's reference trades positions for heads,
    then attends over the last two dims of (B, S, H/W, E), so each position attends over the H/W heads of each
    group of heads (head block j is rank j's in the exchange), and trades back. Every output position depends only
    on that position's own projections: computed here in place, without the exchange. causal is False (PKB's
    harness passes False)."""
    world = dist.get_world_size(group)
    batch, seq, _ = h.shape
    qkv = (h @ w_qkv.t()).view(batch, seq, 3, world, num_heads // world, -1)
    q, k, v = qkv.unbind(2)                                            # (B, S/W, W, H/W, E)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5           # (B, S/W, W, H/W, H/W): heads with heads
    return (torch.softmax(scores, dim=-1) @ v).reshape(batch, seq, -1) @ w_o.t()
