import torch
import torch.distributed as dist
import torch.nn.functional as F


def _heads_from_tokens(x, group, async_op=False):
    """(rows, H, E) with this rank's tokens -> (W * rows, H/W, E) with every rank's tokens (rank j's rows in
    block j) for this rank's group of H/W heads, by one all-to-all; with async_op, also the pending work."""
    world = dist.get_world_size(group)
    rows, heads, width = x.shape
    send = x.reshape(rows, world, heads // world, width).transpose(0, 1).contiguous()
    received = torch.empty_like(send)
    work = dist.all_to_all_single(received, send, group=group, async_op=async_op)
    received = received.view(world * rows, heads // world, width)
    return (received, work) if async_op else received


def _attend(q, k, v):
    """Full (non-causal) attention of q (n, Hq, D) over k, v (m, Hkv, D), query head h using key head
    h // (Hq / Hkv); batched (1, heads, tokens, D) so that the fused attention kernels take it."""
    repeat = q.shape[1] // k.shape[1]
    q, k, v = (x.transpose(0, 1).unsqueeze(0) for x in (q, k.repeat_interleave(repeat, 1),
                                                         v.repeat_interleave(repeat, 1)))
    return F.scaled_dot_product_attention(q, k, v).squeeze(0).transpose(0, 1)


def solution(query, key_value, k_ranges, group):
    """MAGI-1's context-shuffled attention over R ranges (video chunks) of N tokens each, with every rank
    holding N/W tokens of every range, overlapping the all-to-alls with the attention.

    query (R, N/W, Hq, D), key_value (R, N/W, Hkv, 2D) (keys, then values): this rank's tokens of each
    range (rank j holds positions j*N/W to (j+1)*N/W - 1 of every range). k_ranges (R, 2): range r's
    queries attend to the keys at positions [k_ranges[r, 0], k_ranges[r, 1]) of the whole sequence of R*N
    tokens (range-major), the same on every rank.
    Keys and values move to head-parallel form first (each rank: Hkv/W heads, every token); then, range by
    range, the queries go head-parallel while the previous range is attended, and each range's output
    goes back to token-parallel while the next one is attended.
    Returns (R, N/W, Hq, D) in query's dtype: this rank's tokens of every range, every head.
    """
    world = dist.get_world_size(group)
    ranges, tokens, _, head_dim = query.shape
    bounds = k_ranges.tolist()   # the key ranges decide slicing on the host (one synchronisation per call)

    kv = _heads_from_tokens(key_value.reshape(ranges * tokens, -1, 2 * head_dim), group)
    kv = kv.view(world, ranges, tokens, -1, 2 * head_dim).transpose(0, 1).reshape(ranges * world * tokens, -1,
                                                                                   2 * head_dim)
    keys, values = kv[..., :head_dim], kv[..., head_dim:]

    incoming = _heads_from_tokens(query[0], group, async_op=True)
    outgoing = []
    for r in range(ranges):
        q, work = incoming
        work.wait()
        if r + 1 < ranges:                           # the next range's queries move during this attention
            incoming = _heads_from_tokens(query[r + 1], group, async_op=True)
        start, end = bounds[r]
        out = _attend(q, keys[start:end], values[start:end]).contiguous()      # (W * tokens, Hq/W, D)
        returned = torch.empty_like(out)             # back to this rank's tokens during the next range
        outgoing.append((returned, dist.all_to_all_single(returned, out, group=group, async_op=True)))

    result = []
    for returned, work in outgoing:
        work.wait()
        heads = returned.view(world, tokens, -1, head_dim).transpose(0, 1)   # (tokens, W, Hq/W, D)
        result.append(heads.reshape(tokens, -1, head_dim))
    return torch.stack(result)
