import torch
import torch.distributed as dist


def solution(X_hat: torch.Tensor, dY: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight gradients of a LayerNorm whose tokens are split over ranks (sequence parallelism):
    X_hat (M, N) is this rank's normalised inputs, dY (M, N) the gradient of the norm's output for the same
    tokens. d_gamma = sum over every rank's tokens of dY * X_hat, d_beta = the sum of dY: each rank sums
    its tokens and an all-reduce adds the ranks' sums. Returns (d_gamma, d_beta), each (N,), the same on
    every rank."""
    d_gamma = (dY * X_hat).sum(dim=0)
    d_beta = dY.sum(dim=0)
    dist.all_reduce(d_gamma, op=dist.ReduceOp.SUM)
    dist.all_reduce(d_beta, op=dist.ReduceOp.SUM)
    return d_gamma, d_beta
