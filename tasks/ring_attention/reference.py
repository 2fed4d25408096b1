import math

import torch
import torch.distributed as dist


def solution(q, k, v, softmax_scale, causal, group):
    """Ring attention: softmax(q k^T * scale) v over a sequence split into contiguous blocks over `group`.

    q, k, v (B, S/W, H, E): this rank's block of the sequence (rank r holds positions r*S/W to (r+1)*S/W-1).
    Key and value blocks travel around the ring (W-1 steps, each transfer in flight while the block at hand
    is used); each rank merges its blockwise results with a running maximum and sum (a log-sum-exp).
    With `causal`, a query sees the keys at or before its position: blocks from later ranks are skipped.
    Returns (B, S/W, H, E) in q's dtype.
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = dist.get_global_rank(group, (me + 1) % world), dist.get_global_rank(group, (me - 1) % world)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    host_only = q.is_cuda and dist.get_backend(group) == "gloo"  # gloo's send/recv move host memory only
    query = q.transpose(1, 2).float()                                            # (B, H, S/W, E)
    later = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool, device=q.device).triu(1)  # keys after each query

    out = torch.zeros_like(query)
    row_max = torch.full(query.shape[:-1] + (1,), -math.inf, device=q.device)
    row_sum = torch.zeros_like(row_max)
    block = (k, v)
    for step in range(world):
        source = (me - step) % world  # the rank whose keys and values are at hand
        if step + 1 < world:  # pass the block on while this one is used
            outgoing = [t.cpu() for t in block] if host_only else list(block)
            incoming = [torch.empty_like(t) for t in outgoing]
            requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt, group) for t in outgoing]
                                              + [dist.P2POp(dist.irecv, t, prv, group) for t in incoming])
        if not causal or source <= me:
            keys, values = (t.transpose(1, 2).float() for t in block)
            scores = (query @ keys.transpose(-1, -2)) * scale
            if causal and source == me:
                scores = scores.masked_fill(later, -math.inf)
            block_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
            probs = torch.exp(scores - block_max)
            correction = torch.exp(row_max - block_max)
            out = out * correction + probs @ values
            row_sum = row_sum * correction + probs.sum(-1, keepdim=True)
            row_max = block_max
        if step + 1 < world:
            for request in requests:
                request.wait()
            block = tuple(t.to(q.device) for t in incoming)
    return (out / row_sum).transpose(1, 2).to(q.dtype).contiguous()
