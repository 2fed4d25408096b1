import math

import torch
import torch.distributed as dist


def _ring_attention(q, kv, scale, causal, group):
    """Causal-or-full attention of q (B, H, S/cp, E) over the whole sequence: the stacked key/value blocks
    kv (2, B, H, S/cp, E) travel around the ring of `group` (cp-1 steps), merged with a running log-sum-exp."""
    cp, me = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = dist.get_global_rank(group, (me + 1) % cp), dist.get_global_rank(group, (me - 1) % cp)
    host_only = kv.is_cuda and dist.get_backend(group) == "gloo"  # gloo's send/recv move host memory only
    later = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device).triu(1)  # keys after each query
    out = torch.zeros_like(q)
    row_max = torch.full(q.shape[:-1] + (1,), -math.inf, device=q.device)
    row_sum = torch.zeros_like(row_max)
    for step in range(cp):
        source = (me - step) % cp  # the rank whose keys and values are at hand
        if step + 1 < cp:  # pass the block on while this one is used
            outgoing = kv.cpu() if host_only else kv
            incoming = torch.empty_like(outgoing)
            requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, nxt, group),
                                               dist.P2POp(dist.irecv, incoming, prv, group)])
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
    return out / row_sum


def solution(h, w_qkv, w_o, num_heads, softmax_scale, causal, cp_group, pp_group):
    """Pipeline stages of attention layers, each layer context parallel over a ring.

    Ranks form a pp x cp mesh (Megatron's order, cp innermost). Stage p holds layer p's weights: w_qkv
    (3*H*E, D), rows [q; k; v], and w_o (D, H*E). h (B, S/cp, D): this cp rank's block of the sequence.
    The first stage starts from h; every later stage receives its input from the previous stage's rank
    with the same cp coordinate instead (h is ignored there). Each stage projects its block to q, k, v,
    attends over the whole sequence around its cp ring, projects with w_o and hands the result to the next
    stage. Every rank returns its stage's output for its block, (B, S/cp, D).
    """
    stage, stages = dist.get_rank(pp_group), dist.get_world_size(pp_group)
    host_only = h.is_cuda and dist.get_backend(pp_group) == "gloo"
    x = h
    if stage > 0:
        x = torch.empty(h.shape, dtype=h.dtype, device="cpu" if host_only else h.device)
        dist.recv(x, dist.get_global_rank(pp_group, stage - 1), group=pp_group)
        x = x.to(h.device)

    batch, seq, _ = x.shape
    qkv = (x @ w_qkv.t()).view(batch, seq, 3, num_heads, -1).permute(2, 0, 3, 1, 4)  # (3, B, H, S/cp, E)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(qkv.shape[-1])
    attn = _ring_attention(qkv[0].float(), qkv[1:].contiguous(), scale, causal, cp_group).to(h.dtype)
    out = attn.permute(0, 2, 1, 3).reshape(batch, seq, -1) @ w_o.t()

    if stage + 1 < stages:
        dist.send(out.cpu() if host_only else out, dist.get_global_rank(pp_group, stage + 1), group=pp_group)
    return out
