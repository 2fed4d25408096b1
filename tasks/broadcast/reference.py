import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor, src: int) -> torch.Tensor:
    """Every rank returns a copy of rank `src`'s (M, N) tensor; the other ranks' values are ignored."""
    out = tensor.clone()
    dist.broadcast(out, src=src)
    return out
