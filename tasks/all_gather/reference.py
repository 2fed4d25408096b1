import torch
import torch.distributed as dist

# torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns); older torch has only the old one
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Gather every rank's (M, N) tensor onto every rank: returns (W, M, N) with out[j] = rank j's tensor."""
    world = dist.get_world_size()
    out = tensor.new_empty((world * tensor.shape[0], *tensor.shape[1:]))
    _all_gather(out, tensor)
    return out.view(world, *tensor.shape)
