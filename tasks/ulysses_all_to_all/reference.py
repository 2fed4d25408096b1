import torch
import torch.distributed as dist


def solution(x, scatter_dim, gather_dim, group):
    """Ulysses' all-to-all of a tensor: split x into W blocks along scatter_dim, send block j to rank j of
    `group`, and concatenate the blocks received from every rank along gather_dim, in rank order.

    With x (M, N), scatter_dim 0 and gather_dim 1, rank r returns (M/W, W*N): row block r of every rank's x,
    side by side (columns s*N to (s+1)*N-1 come from rank s).
    """
    world = dist.get_world_size(group)
    send = x.movedim(scatter_dim, 0).contiguous()  # block j of the scatter dim is now contiguous: it goes to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block s of recv came from rank s
    return torch.cat([block.movedim(0, scatter_dim) for block in recv.chunk(world)], dim=gather_dim)
