import torch
import torch.distributed as dist


@torch.no_grad()
def solution(pos_score, neg_score, group):
    """Link-prediction evaluation: the rank of every positive edge among its negatives, gathered from every rank.

    pos_score (n,): this rank's positive edges' scores (n differs by rank and by call); neg_score (n, K): K
    negative scores per positive. The rank of a positive is 1 + the number of its negatives scoring at least
    as high (a tie counts against the positive). Returns every rank's ranks concatenated in rank order
    (sum of n over ranks,), int64, the same on every rank.
    """
    world = dist.get_world_size(group)
    ranks = (neg_score >= pos_score[:, None]).sum(dim=1) + 1
    size = torch.tensor([ranks.numel()], dtype=torch.int64, device=ranks.device)
    sizes = torch.empty(world, dtype=torch.int64, device=ranks.device)
    dist.all_gather_into_tensor(sizes, size, group=group)
    counts = sizes.tolist()
    padded = ranks.new_zeros(max(counts))
    padded[:ranks.numel()] = ranks
    gathered = ranks.new_empty(world * max(counts))
    dist.all_gather_into_tensor(gathered, padded, group=group)
    return torch.cat([block[:count] for block, count in zip(gathered.view(world, -1), counts)])
