import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` element-wise over all ranks; every rank returns the full sum (a new tensor)."""
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
