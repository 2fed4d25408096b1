import torch
import torch.distributed as dist


def solution(qkv, seq_dim, group):
    """Ulysses before attention, on a packed projection: from sequence-sharded to head-sharded q, k and v.

    qkv (B, S, 3*H*E): this rank's block of S positions of a (B, W*S, .) sequence, features [q | k | v],
    each H heads of E. Rank r of `group` returns (B, W*S, 3*(H/W)*E): every position, in rank order, of
    heads r*H/W to (r+1)*H/W-1, features [q | k | v] of those heads. An all-to-all: head block j of each
    of q, k and v goes to rank j.
    """
    world = dist.get_world_size(group)
    *lead, width = qkv.shape
    parts = qkv.view(*lead, 3, width // 3)  # (B, S, 3, H*E)
    send = parts.movedim(-1, 0).contiguous()  # (H*E, B, S, 3): head block j is contiguous, it goes to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block s of recv: rank s's positions, my heads
    out = torch.cat([block.movedim(0, -1) for block in recv.chunk(world)], dim=seq_dim)  # (B, W*S, 3, H*E/W)
    return out.reshape(*out.shape[:-2], -1)
