import torch
import torch.distributed as dist


def solution(chunks: torch.Tensor, src: int) -> torch.Tensor:
    """Rank r returns rank `src`'s chunks[r], shape (M, N); the other ranks' chunks are ignored."""
    out = chunks.new_empty(chunks.shape[1:])
    pieces = list(chunks.unbind(0)) if dist.get_rank() == src else None
    dist.scatter(out, pieces, src=src)
    return out
