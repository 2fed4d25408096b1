import math

import torch
import torch.distributed as dist


def _pass_on(tensor, group, host_only):
    """Start sending `tensor` to the next rank of the ring and receiving the previous rank's into a new
    buffer; returns (requests, buffer)."""
    me, n = dist.get_rank(group), dist.get_world_size(group)
    outgoing = tensor.cpu() if host_only else tensor  # gloo's send/recv move host memory only
    incoming = torch.empty_like(outgoing)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, outgoing, dist.get_global_rank(group, (me + 1) % n), group),
        dist.P2POp(dist.irecv, incoming, dist.get_global_rank(group, (me - 1) % n), group)])
    return requests, incoming


def _wait(requests, buffer, device):
    for request in requests:
        request.wait()
    return buffer.to(device)


def solution(dout, q, k, v, out, softmax_lse, softmax_scale, causal, cp_group, dp_group):
    """Backward of ring attention (FlashAttention's backward, blockwise), then gradients averaged over
    data-parallel replicas.

    Ranks form a dp x cp mesh (Megatron's order 'cp-dp': cp innermost). dout, q, k, v, out (B, S/cp, H, E):
    this rank's block of its replica's sequence; softmax_lse (B, H, S/cp), float32: the log-sum-exp the
    forward saved for these queries. With P = exp(q k^T * scale - lse) and dS = P * (dout v^T -
    rowsum(dout * out)): dq = dS k * scale, dk = dS^T q * scale, dv = P^T dout, over the whole sequence.
    Two rings: key/value blocks travel around the cp ring while each rank adds its queries' share to the
    gradients of the block at hand, and those partial gradients (float32) travel one step behind them,
    reaching the block's owner after a full turn. Then dq, dk and dv are averaged over dp.
    Returns (dq, dk, dv), each (B, S/cp, H, E) in q's dtype, the same on the dp peers.
    """
    cp, me = dist.get_world_size(cp_group), dist.get_rank(cp_group)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    host_only = q.is_cuda and dist.get_backend(cp_group) == "gloo"
    query, grad_out = q.transpose(1, 2).float(), dout.transpose(1, 2).float()  # (B, H, S/cp, E)
    delta = (grad_out * out.transpose(1, 2).float()).sum(-1, keepdim=True)  # rowsum(dout * out)
    lse = softmax_lse.unsqueeze(-1)
    later = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool, device=q.device).triu(1)  # keys after each query

    dq = torch.zeros_like(query)
    kv = torch.stack([k, v])  # (2, B, S/cp, H, E): the block at hand, in the dtype
    for step in range(cp):
        source = (me - step) % cp  # the rank whose keys and values are at hand
        if step + 1 < cp:
            kv_requests, kv_next = _pass_on(kv, cp_group, host_only)
        # the partial gradients of this block from the ranks it visited before, float32 (B, H, S/cp, E) x 2
        grads = torch.zeros(2, *query.shape, device=q.device) if step == 0 else \
            _wait(grad_requests, grad_next, q.device)
        if not causal or source <= me:
            keys, values = kv[0].transpose(1, 2).float(), kv[1].transpose(1, 2).float()
            scores = (query @ keys.transpose(-1, -2)) * scale
            if causal and source == me:
                scores = scores.masked_fill(later, -math.inf)
            probs = torch.exp(scores - lse)
            dscores = probs * (grad_out @ values.transpose(-1, -2) - delta)
            dq = dq + dscores @ keys * scale
            grads = grads + torch.stack([dscores.transpose(-1, -2) @ query * scale,
                                         probs.transpose(-1, -2) @ grad_out])
        if cp > 1:  # on to the next rank
            grad_requests, grad_next = _pass_on(grads, cp_group, host_only)
        if step + 1 < cp:
            kv = _wait(kv_requests, kv_next, q.device)
    dk, dv = _wait(grad_requests, grad_next, q.device) if cp > 1 else grads  # this rank's block, after a full turn

    results = [g.transpose(1, 2).to(q.dtype).contiguous() for g in (dq, dk, dv)]
    dp = dist.get_world_size(dp_group)
    for g in results:
        dist.all_reduce(g, group=dp_group)
        g.div_(dp)
    return tuple(results)
