import torch
import torch.distributed as dist


def solution(x, seq_dim, head_dim, group):
    """Ulysses after attention: from head-sharded back to sequence-sharded.

    x (B, S, H, E): every position of this rank's block of H heads (rank r holds heads r*H to (r+1)*H-1 of
    W*H). Rank r of `group` returns (B, S/W, W*H, E): positions r*S/W to (r+1)*S/W-1 with all W*H heads,
    in head order. An all-to-all: sequence block j of every rank's x goes to rank j.
    """
    world = dist.get_world_size(group)
    send = x.movedim(seq_dim, 0).contiguous()  # sequence block j is now contiguous: it goes to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block s of recv: rank s's heads, my positions
    return torch.cat([block.movedim(0, seq_dim) for block in recv.chunk(world)], dim=head_dim)
