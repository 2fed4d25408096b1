import torch
import torch.distributed as dist


def solution(x, seq_dim, head_dim, group):
    """Ulysses before attention: from sequence-sharded to head-sharded.

    x (B, S, H, E): this rank's block of S positions of a (B, W*S, H, E) sequence, all H heads. Rank r of
    `group` returns (B, W*S, H/W, E): the whole sequence for heads r*H/W to (r+1)*H/W-1, positions in rank
    order. An all-to-all: head block j of every rank's x goes to rank j.
    """
    world = dist.get_world_size(group)
    send = x.movedim(head_dim, 0).contiguous()  # head block j is now contiguous: it goes to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block s of recv: rank s's positions, my heads
    return torch.cat([block.movedim(0, head_dim) for block in recv.chunk(world)], dim=seq_dim)
