import math

import torch
import torch.distributed as dist


def solution(h, w_qkv, w_o, group, num_heads, causal):
    """One attention layer with Ulysses sequence parallelism over the ranks of `group`.

    h (B, S/W, D): this rank's block of the sequence (rank r holds positions r*S/W to (r+1)*S/W-1).
    w_qkv (3*H*E, D), rows [q; k; v], and w_o (D, H*E): the layer's weights, the same on every rank.
    Each rank projects its block to q, k, v for all H heads; an all-to-all trades positions for heads
    (rank r receives every position of heads r*H/W to (r+1)*H/W-1); attention runs locally per head; a
    second all-to-all trades heads back for positions; each rank projects its block. Returns (B, S/W, D).
    """
    world = dist.get_world_size(group)
    batch, seq, _ = h.shape
    qkv = (h @ w_qkv.t()).view(batch, seq, 3, num_heads, -1)  # (B, S/W, 3, H, E)

    send = qkv.permute(3, 0, 1, 2, 4).contiguous()  # (H, B, S/W, 3, E): head block j goes to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block s: rank s's positions of my heads
    q, k, v = torch.cat(recv.chunk(world), dim=2).permute(3, 1, 0, 2, 4).float()  # each (B, H/W, S, E)

    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        full = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(full, full, dtype=torch.bool, device=h.device).triu(1), -math.inf)
    attn = (torch.softmax(scores, dim=-1) @ v).to(h.dtype)  # (B, H/W, S, E)

    send = attn.permute(2, 0, 1, 3).contiguous()  # (S, B, H/W, E): sequence block j goes to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block s: my positions of rank s's heads
    attn = torch.cat(recv.chunk(world), dim=2)  # (S/W, B, H, E)
    return attn.permute(1, 0, 2, 3).reshape(batch, seq, -1) @ w_o.t()
