import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Exchange chunks: tensor and result are (W, M, N), and out[j] on rank r is rank j's tensor[r]."""
    out = tensor.new_empty(tensor.shape)
    dist.all_to_all_single(out, tensor)
    return out
