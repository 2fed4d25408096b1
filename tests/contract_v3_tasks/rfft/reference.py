import torch
import torch.distributed as dist


def solution(x):
    """Every rank holds a block of rows of x (M, N); every rank returns the real FFT along dim 1 of the whole
    x, (M, N // 2 + 1), complex."""
    blocks = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(blocks, x)
    return torch.fft.rfft(torch.cat(blocks), dim=1)
