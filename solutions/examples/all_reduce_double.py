"""A wrong all_reduce: the sum of every rank, doubled (the judge reports the mismatch). For the toy
candidate sets of the dataset tests and agents/expert_iteration.py --tiny."""
import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out * 2
