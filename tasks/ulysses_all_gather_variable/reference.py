import torch
import torch.distributed as dist


def solution(x, gather_dim, group):
    """Ulysses' all-gather of blocks whose sizes differ by rank: every rank of `group` returns all ranks'
    x concatenated along gather_dim, in rank order.

    x (rows, N): rows differs from rank to rank and from call to call, and no rank knows another's. The
    sizes are gathered first and read on the host (they decide the buffers); then every rank gathers the
    blocks padded to the largest and drops the padding.
    """
    world = dist.get_world_size(group)
    block = x.movedim(gather_dim, 0)
    sizes = torch.empty(world, dtype=torch.int64, device=x.device)
    dist.all_gather_into_tensor(sizes, torch.tensor([block.shape[0]], device=x.device), group=group)
    sizes = sizes.tolist()
    longest = max(sizes)
    padded = block.new_zeros((longest, *block.shape[1:]))
    padded[:block.shape[0]] = block
    gathered = block.new_empty((world * longest, *block.shape[1:]))
    dist.all_gather_into_tensor(gathered, padded, group=group)
    parts = [gathered[i * longest:i * longest + size] for i, size in enumerate(sizes)]
    return torch.cat(parts).movedim(0, gather_dim)
