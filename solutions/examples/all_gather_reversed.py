"""A wrong all_gather: every rank's tensor is there, in reverse rank order. For the toy candidate sets
of the dataset tests and agents/expert_iteration.py --tiny."""
import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor)
    return torch.stack(parts[::-1])
