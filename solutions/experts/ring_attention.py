"""Ring attention (causal) over symmetric memory: FlashAttention blocks, keys and values pulled by copy engine.

Every rank publishes its keys and values in its symmetric buffer; after one stream-ordered barrier a rank
can read any peer's block directly, so there is no ring to forward around: rank r pulls exactly the blocks
it needs (under a causal mask, ranks 0..r-1; the later blocks are never moved) with copy-engine copies on a
high-priority side stream, while the main stream runs the attention of the block already at hand
(FlashAttention's forward through `aten::_scaled_dot_product_flash_attention`, which also returns the
log-sum-exp of every query row). The blocks' outputs are merged once at the end in float32:
    lse = logsumexp_j(lse_j),   out = sum_j exp(lse_j - lse) * out_j.

Why it beats the reference: the reference attends in float32 with explicit (S/W)^2 score matrices (CUDA
cores, several passes over them in HBM) and forwards every block around the whole ring; here each block is
one FlashAttention call in the input dtype on tensor cores, and a rank receives only what its queries see.

Buffers are reused across calls without a trailing barrier: the buffer has two slots and call i publishes
into slot i % 2, so a rank overwrites a slot only two calls later, after a barrier its peers reach only
once their pulls of that slot are done (their pulls and barriers share one stream). Every side-stream
operation is joined to the caller's stream before `solution` returns.

Not done (the next levers): the causal work is unbalanced (rank W-1 attends to W blocks, rank 0 to one);
moving half of each off-diagonal block's heads to a less loaded rank would halve the slowest rank's time.
"""
import math

import torch
import torch.distributed as dist

from pkb_env.runtime import symmetric_buffer

_state = {}


# -- the math (also run on CPU tensors by the tests) ------------------------------------------------------

def sources(rank, world, causal):
    """The peers whose key/value blocks `rank` needs, nearest first: the earlier ranks under a causal mask
    (a query never sees later positions), every other rank without one."""
    if causal:
        return list(range(rank - 1, -1, -1))
    return [(rank - step) % world for step in range(1, world)]


def block_attention(q, k, v, scale, causal):
    """(out, lse) of q over one key/value block: out (B, H, S, E) in q's dtype, lse (B, H, S) in float32.

    q, k, v are (B, S, H, E). FlashAttention where it applies (CUDA, 16-bit, head dim a multiple of 8 up to
    256); otherwise the same math with explicit float32 scores, its output rounded to q's dtype as
    FlashAttention's is."""
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    head_dim = q.shape[-1]
    if q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and head_dim % 8 == 0 and head_dim <= 256:
        result = torch.ops.aten._scaled_dot_product_flash_attention(qh, kh, vh, 0.0, causal, False, scale=scale)
        return result[0], result[1][..., :q.shape[1]]   # (a backend may pad the rows of lse)
    scores = (qh.float() @ kh.float().transpose(-1, -2)) * scale
    if causal:
        hidden = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(hidden, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse[..., None]) @ vh.float()
    return out.to(q.dtype), lse


def merge(blocks, dtype):
    """The attention over the union of the blocks, from each block's (out, lse), as (B, S, H, E) `dtype`."""
    if len(blocks) == 1:
        out = blocks[0][0]
    else:
        lses = torch.stack([lse for _, lse in blocks])                  # (n, B, H, S)
        weights = torch.exp(lses - torch.logsumexp(lses, dim=0))        # each block's share of every row
        outs = torch.stack([o for o, _ in blocks]).float()              # (n, B, H, S, E)
        out = (outs * weights[..., None]).sum(dim=0)
    return out.transpose(1, 2).to(dtype).contiguous()


# -- data movement -------------------------------------------------------------------------------------

def _resources(q, group, world):
    """The cached buffer (2 slots x [k; v]), its peers' views, the staging blocks, the side stream and
    events for this shape; made once (the buffer's rendezvous is collective)."""
    key = (tuple(q.shape), q.dtype, id(group))
    if key not in _state:
        n = q.numel()
        buf = symmetric_buffer((2, 2, n), q.dtype, tag="expert_ring_attention", group=group)
        _state[key] = {
            "buf": buf,
            "peers": [buf.peer(p) for p in range(world)],
            "stage": torch.empty((max(world - 1, 1), 2, n), dtype=q.dtype, device=q.device),
            "side": torch.cuda.Stream(device=q.device, priority=-1),  # copies ahead of the attention kernels
            "start": torch.cuda.Event(),
            "pulled": [torch.cuda.Event() for _ in range(max(world - 1, 1))],
            "calls": 0,
        }
    return _state[key]


def solution(q, k, v, softmax_scale, causal, group):
    group = group if group is not None else dist.group.WORLD
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    world = dist.get_world_size(group)
    if world == 1:
        return merge([block_attention(q, k, v, scale, causal)], q.dtype)

    res = _resources(q, group, world)
    buf, stage, side = res["buf"], res["stage"], res["side"]
    rank, slot = buf.rank, res["calls"] % 2
    res["calls"] += 1
    shape = q.shape
    main = torch.cuda.current_stream()
    res["start"].record(main)          # inputs are ready and the previous call's attention is queued
    side.wait_event(res["start"])
    needed = sources(rank, world, causal)
    with torch.cuda.stream(side):
        buf.local[slot, 0].view(shape).copy_(k)
        buf.local[slot, 1].view(shape).copy_(v)
        buf.barrier()                  # every rank's keys and values are in its slot
        for j, peer in enumerate(needed):
            stage[j].copy_(res["peers"][peer][slot])   # copy engine, over NVLink
            res["pulled"][j].record(side)

    blocks = [block_attention(q, k, v, scale, causal)]
    for j, _ in enumerate(needed):
        main.wait_event(res["pulled"][j])
        blocks.append(block_attention(q, stage[j, 0].view(shape), stage[j, 1].view(shape), scale, False))
    if not needed:                     # nothing pulled: still join the side stream (publish and barrier)
        res["pulled"][0].record(side)
        main.wait_event(res["pulled"][0])
    return merge(blocks, q.dtype)
