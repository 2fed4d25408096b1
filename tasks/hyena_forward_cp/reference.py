import torch
import torch.distributed as dist


def _to_channels(x, group):
    """(B, D, 2T), this rank's zigzag chunks r and 2W-1-r of every channel -> (B, D/W, 2W*T), this rank's
    block of channels over the whole sequence, in order."""
    world = dist.get_world_size(group)
    batch, channels, local = x.shape
    send = x.reshape(batch, world, channels // world, local).transpose(0, 1).contiguous()  # block j: rank j's channels
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block i: rank i's two chunks of my channels
    chunks = recv.reshape(world, batch, channels // world, 2, local // 2)
    ordered = torch.cat([chunks[:, :, :, 0], chunks.flip(0)[:, :, :, 1]])  # chunks 0..2W-1: (2W, B, D/W, T)
    return ordered.permute(1, 2, 0, 3).reshape(batch, channels // world, world * local)


def _to_sequence(y, group):
    """The inverse of _to_channels: (B, D/W, 2W*T) -> (B, D, 2T), this rank's zigzag chunks of every channel."""
    world = dist.get_world_size(group)
    batch, channels, length = y.shape
    chunks = y.reshape(batch, channels, 2 * world, length // (2 * world))
    pairs = torch.stack([chunks[:, :, :world], chunks[:, :, world:].flip(2)], dim=3)  # rank j: chunks j, 2W-1-j
    send = pairs.permute(2, 0, 1, 3, 4).contiguous()  # (W, B, D/W, 2, T): block j to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # block i: rank i's channels of my two chunks
    return recv.permute(1, 0, 2, 3, 4).reshape(batch, world * channels, length // world)


@torch.no_grad()
def solution(x1, x2, v, h, bias, group):
    """The Hyena operator's long convolution (order 2) under zigzag context parallelism (Savanna / Evo 2).

    The sequence of S = 2W*T positions is cut into 2W chunks of T; rank r holds chunks r and 2W-1-r side
    by side: x1, x2, v (B, D, 2T). h (D, S) is one long causal filter per channel and bias (D,) one skip
    weight per channel, the same on every rank. Per channel, with z = x2 * v over the whole sequence:
        y[t] = x1[t] * (sum_{s <= t} h[t - s] z[s] + bias * z[t])
    The convolution needs a channel's whole sequence: an all-to-all hands every rank all positions of its
    block of channels, the convolution runs as an FFT of length 2S in float32, and a second all-to-all
    returns the positions. Returns (B, 2T, D): this rank's two chunks, positions first.
    """
    rank = dist.get_rank(group)
    x1, x2, v = (_to_channels(t, group) for t in (x1, x2, v))
    channels, length = x1.shape[1], x1.shape[2]
    mine = slice(rank * channels, (rank + 1) * channels)
    z = x2 * v
    spectrum = torch.fft.rfft(z.float(), n=2 * length) * torch.fft.rfft(h[mine].float(), n=2 * length)
    conv = torch.fft.irfft(spectrum, n=2 * length)[..., :length]  # zero-padded to 2S: causal, no wrap-around
    y = x1 * (conv + z.float() * bias[mine].float().unsqueeze(-1)).to(z.dtype)
    return _to_sequence(y, group).transpose(1, 2).contiguous()
