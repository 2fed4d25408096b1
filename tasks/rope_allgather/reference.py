import torch
import torch.distributed as dist


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def solution(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
             sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding on this rank's block of the sequence, then an all-gather of the rotated
    queries and keys along the sequence: q, k (B, S/W, H, E) and cos, sin (B, S/W, E) hold positions
    [r*S/W, (r+1)*S/W) on rank r. Rotation: x * cos + rotate_half(x) * sin, cos and sin shared by the
    heads. Returns (q_rot, k_rot), each (B, S, H, E): the whole sequence, the same on every rank."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    q_rot = q * cos + rotate_half(q) * sin
    k_rot = k * cos + rotate_half(k) * sin
    world = dist.get_world_size()
    q_blocks = [torch.empty_like(q_rot) for _ in range(world)]
    k_blocks = [torch.empty_like(k_rot) for _ in range(world)]
    dist.all_gather(q_blocks, q_rot.contiguous())
    dist.all_gather(k_blocks, k_rot.contiguous())
    return torch.cat(q_blocks, dim=1), torch.cat(k_blocks, dim=1)
