import torch
import torch.distributed as dist


def solution(flat_grad: torch.Tensor, block_size: int) -> torch.Tensor:
    """Data-parallel gradient averaging through int8 codes. Every rank holds its own flat gradient; each run
    of block_size consecutive values is quantised with the scale s = max(max|x|, 1e-8) / 127 (fp32) to the
    codes q = round(x / s) (the fp32 quotient, rounded half to even) clamped to [-127, 127] (int8). Every
    rank returns the mean over ranks of the dequantised values q * s, summed in fp32 and rounded to
    flat_grad's dtype, shape and dtype of flat_grad."""
    blocks = flat_grad.float().view(-1, block_size)
    scale = blocks.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
    codes = (blocks / scale).round().clamp(-127, 127).to(torch.int8)
    total = (codes.float() * scale).flatten()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return (total / dist.get_world_size()).to(flat_grad.dtype)
