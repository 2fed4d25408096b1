import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` is (W*M, N); rank r returns the sum over ranks of rows [r*M, (r+1)*M), shape (M, N)."""
    world = dist.get_world_size()
    out = tensor.new_empty((tensor.shape[0] // world, *tensor.shape[1:]))
    dist.reduce_scatter_tensor(out, tensor, op=dist.ReduceOp.SUM)
    return out
