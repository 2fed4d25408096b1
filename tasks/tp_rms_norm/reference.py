import torch
import torch.distributed as dist


def solution(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over a hidden dimension split across ranks: hidden_states (M, N/W) is this rank's block of
    columns of the activations (M, N), weight (N/W,) its block of the norm's weight. Each row's mean of
    squares runs over all N columns, so the ranks all-reduce their fp32 sums of squares, (M, 1).
    Returns (M, N/W): this rank's block of weight * x / sqrt(mean(x^2) + eps), in the input dtype."""
    dtype = hidden_states.dtype
    x = hidden_states.float()
    sum_sq = x.pow(2).sum(dim=-1, keepdim=True)
    dist.all_reduce(sum_sq, op=dist.ReduceOp.SUM)
    variance = sum_sq / (x.shape[-1] * dist.get_world_size())
    return weight * (x * torch.rsqrt(variance + eps)).to(dtype)
