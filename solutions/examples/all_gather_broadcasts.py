"""A correct but slow all_gather: one broadcast per rank, one after the other (W collectives instead of
one). For the toy candidate sets of the dataset tests and agents/expert_iteration.py --tiny."""
import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    world, rank = dist.get_world_size(), dist.get_rank()
    out = tensor.new_empty((world, *tensor.shape))
    for src in range(world):
        if src == rank:
            out[src].copy_(tensor)
        dist.broadcast(out[src], src=src)
    return out
