import math

import torch
import torch.distributed as dist


def solution(h, w_qkv, w_o, num_heads, scale, causal, tp_group, cp_group):
    """One attention layer with tensor parallelism over heads and context parallelism over the sequence.

    h (B, S/cp, D): this cp rank's contiguous block of the sequence (the same on its tp peers).
    w_qkv (3*H/tp*E, D): this tp rank's rows of the QKV projection, [q; k; v] for its H/tp heads.
    w_o (D, H/tp*E): this tp rank's columns of the output projection.
    Keys and values travel around the cp ring (cp-1 steps); each rank merges blockwise attention with a
    running log-sum-exp; the output projection's partial sums are all-reduced over tp.
    Returns (B, S/cp, D), the same on the tp peers.
    """
    tp, cp = dist.get_world_size(tp_group), dist.get_world_size(cp_group)
    me = dist.get_rank(cp_group)
    batch, seq, _ = h.shape
    heads = num_heads // tp
    qkv = (h @ w_qkv.t()).view(batch, seq, 3, heads, -1).permute(2, 0, 3, 1, 4)  # (3, B, heads, S/cp, E)
    q = qkv[0].float()
    kv = torch.stack([qkv[1], qkv[2]]).contiguous()
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    later = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)  # keys after each query
    host_only = kv.is_cuda and dist.get_backend(cp_group) == "gloo"  # gloo's send/recv move host memory only

    out = torch.zeros_like(q)
    row_max = torch.full(q.shape[:-1] + (1,), -math.inf, device=q.device)
    row_sum = torch.zeros(q.shape[:-1] + (1,), device=q.device)
    for step in range(cp):
        source = (me - step) % cp
        if step + 1 < cp:  # pass the block on while this one is used
            outgoing = kv.cpu() if host_only else kv
            incoming = torch.empty_like(outgoing)
            nxt, prv = dist.get_global_rank(cp_group, (me + 1) % cp), dist.get_global_rank(cp_group, (me - 1) % cp)
            requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, nxt, cp_group),
                                               dist.P2POp(dist.irecv, incoming, prv, cp_group)])
        if not causal or source <= me:
            scores = (q @ kv[0].float().transpose(-1, -2)) * scale
            if causal and source == me:
                scores = scores.masked_fill(later, -math.inf)
            block_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
            probs = torch.exp(scores - block_max)
            correction = torch.exp(row_max - block_max)
            out = out * correction + probs @ kv[1].float()
            row_sum = row_sum * correction + probs.sum(-1, keepdim=True)
            row_max = block_max
        if step + 1 < cp:
            for request in requests:
                request.wait()
            kv = incoming.to(q.device)
    attn = (out / row_sum).to(h.dtype).permute(0, 2, 1, 3).reshape(batch, seq, -1)  # (B, S/cp, heads*E)
    result = attn @ w_o.t()
    dist.all_reduce(result, group=tp_group)
    return result
