import torch
import torch.distributed as dist


def solution(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Row-parallel linear layer: every rank holds a K-block of the activations, A (M, K), and the matching
    rows of the weight, B (K, N); every rank returns the full product, the sum over ranks of A @ B, (M, N)."""
    out = A @ B
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
