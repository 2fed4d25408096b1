import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, norm, group):
    """PhysicsNeMo's distributed inverse 2-D real FFT (DistributedIRFFT2) of a half spectrum split over `group`.

    The half spectrum is (B, C, H, X//2 + 1) complex; rank r holds x (B, C, H/W, X//2 + 1), its block r of
    rows (dim 2). Returns rank r's block r of columns (dim 3) of torch.fft.irfft2(spectrum, s=(H, X),
    dim=(2, 3), norm=norm), (B, C, H, X/W) real, with X = 2 * (X//2 + 1 - 1).

    irfft2 is an inverse FFT along dim 2, then a complex-to-real inverse along dim 3 that counts each column
    frequency 1..X/2-1 twice (itself and its conjugate mirror) and the real parts of frequencies 0 and X/2.
    That last inverse is the real part of a plain complex inverse of the half spectrum with frequencies
    1..X/2-1 doubled, and taking the real part commutes with the inverse along dim 2: so each rank inverts
    along dim 3 the rows it holds, an all-to-all hands every rank all rows of its block of columns, and the
    inverse along dim 2 and the real part finish.
    """
    world = dist.get_world_size(group)
    width = 2 * (x.shape[3] - 1)
    twice = torch.full((x.shape[3],), 2.0, dtype=x.real.dtype, device=x.device)
    twice[0] = twice[-1] = 1.0  # frequencies 0 and X/2 have no mirror
    field = torch.fft.ifft(x * twice, n=width, dim=3, norm=norm)  # (B, C, H/W, X), complex
    batch, channels, rows, _ = field.shape
    send = field.reshape(batch, channels, rows, world, width // world).permute(3, 0, 1, 2, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block i: rank i's rows of my columns
    field = recv.permute(1, 2, 0, 3, 4).reshape(batch, channels, world * rows, width // world)  # (B, C, H, X/W)
    return torch.fft.ifft(field, dim=2, norm=norm).real.contiguous()
