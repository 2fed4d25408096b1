import torch
import torch.distributed as dist


def solution(x: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Blockwise FP8 quantisation of this rank's activations, then an all-gather of the quantised rows and
    their scales: x (M, N) holds rows [r*M, (r+1)*M) on rank r. Each run of block_size consecutive values
    of a row gets the scale s = max|x| / 448 (448 is float8_e4m3fn's largest value) and is stored as
    x / s in float8_e4m3fn (an all-zero block keeps s = 0 and is divided by 1). Returns (y, s): y
    (W*M, N) float8_e4m3fn and s (W*M, N/block_size) float32, the rows of every rank in rank order."""
    blocks = x.float().unflatten(-1, (-1, block_size))                   # (M, N/block_size, block_size)
    scale = blocks.abs().amax(dim=-1) / 448.0
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    y = (blocks / divisor.unsqueeze(-1)).to(torch.float8_e4m3fn).flatten(-2)
    world = dist.get_world_size()
    y_all = torch.empty((world * y.shape[0], y.shape[1]), dtype=torch.uint8, device=x.device)
    dist.all_gather_into_tensor(y_all, y.view(torch.uint8))             # gloo has no fp8: move the bytes
    s_all = scale.new_empty((world * scale.shape[0], scale.shape[1]))
    dist.all_gather_into_tensor(s_all, scale)
    return y_all.view(torch.float8_e4m3fn), s_all
