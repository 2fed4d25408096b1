import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor, dst: int) -> torch.Tensor | None:
    """Sum `tensor` element-wise over all ranks onto rank `dst`: dst returns the sum, others None."""
    out = tensor.clone()
    dist.reduce(out, dst=dst, op=dist.ReduceOp.SUM)
    return out if dist.get_rank() == dst else None
