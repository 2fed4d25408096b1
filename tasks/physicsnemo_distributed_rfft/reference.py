import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, norm, group):
    """PhysicsNeMo's distributed 2-D real FFT (DistributedRFFT2) of a batch of fields split over `group`.

    The fields are (B, H, X) real; rank r holds x (B, H, X/W), its block r of columns (dim 2). Returns rank
    r's block r of rows (dim 1) of torch.fft.rfft2(fields, dim=(1, 2), norm=norm): (B, H/W, X//2 + 1),
    complex. The FFT along dim 1 runs on the columns a rank holds; an all-to-all then hands every rank its
    block of rows with every column, and the FFT along dim 2 keeps the first X//2 + 1 frequencies.
    """
    world = dist.get_world_size(group)
    spectrum = torch.fft.fft(x, dim=1, norm=norm)  # (B, H, X/W): every row frequency of my columns
    batch, rows, cols = spectrum.shape
    send = spectrum.reshape(batch, world, rows // world, cols).transpose(0, 1).contiguous()  # block j: rank j's rows
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block i: my rows of rank i's columns
    spectrum = recv.permute(1, 2, 0, 3).reshape(batch, rows // world, world * cols)  # (B, H/W, X)
    spectrum = torch.fft.fft(spectrum, dim=2, norm=norm)
    return spectrum[..., : world * cols // 2 + 1].contiguous()
