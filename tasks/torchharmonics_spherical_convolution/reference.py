import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, psi, weight, bias, azimuth_group, polar_group):
    """torch-harmonics' distributed DISCO convolution on the sphere (DistributedDiscreteContinuousConvS2).

    The grid of H latitudes x X longitudes is split over a polar x azimuth mesh: rank (p, a) holds
    x (B, C, H/P, X/A), latitudes p*H/P.. and longitudes a*X/A.. of every channel. psi (K, H, H/P * X), sparse
    COO, is this polar block's slice of the filter operator: entry [k, i, j*X + m] weighs input point (latitude
    j of the block, longitude m) for basis function k at output latitude i and longitude 0; the output at
    longitude l reads the input rotated by l. weight (O, C, K) mixes channels and basis functions; bias (O,).
        y[b, c, k, i, l] = sum over every input latitude j and longitude m of psi[k, i, j, m] x[b, c, j, (m + l) % X]
        out[b, o, i, l] = bias[o] + sum_{c, k} weight[o, c, k] y[b, c, k, i, l]
    Returns this rank's block of out, (B, O, H/P, X/A): the same latitudes and longitudes as its x.
    """
    azimuth = dist.get_world_size(azimuth_group)
    polar, polar_rank = dist.get_world_size(polar_group), dist.get_rank(polar_group)
    batch, channels, lat, lon = x.shape
    kernels, out_lat = psi.shape[0], psi.shape[1]
    # azimuth transpose: every longitude of my block of channels
    send = x.reshape(batch, azimuth, channels // azimuth, lat, lon).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=azimuth_group)  # block i: azimuth rank i's longitudes
    x = recv.permute(1, 2, 3, 0, 4).reshape(batch, channels // azimuth, lat, azimuth * lon)
    width = azimuth * lon
    # the contraction over my latitudes, one output longitude at a time: psi against the rotated input
    cols = x.permute(2, 3, 0, 1).reshape(lat * width, -1)  # (lat * X, B * C/A), latitude-major
    y = x.new_empty(width, kernels, out_lat, cols.shape[1])
    for l in range(width):
        y[l] = torch.bmm(psi, cols.expand(kernels, -1, -1))
        cols = cols.reshape(lat, width, -1).roll(-1, dims=1).reshape(lat * width, -1)
    dist.all_reduce(y, group=polar_group)  # the sum over every polar block's input latitudes
    rows = out_lat // polar
    y = y[:, :, polar_rank * rows:(polar_rank + 1) * rows]  # my output latitudes
    # azimuth transpose back: my longitudes of every channel
    send = y.reshape(azimuth, width // azimuth, kernels, rows, batch, channels // azimuth).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=azimuth_group)  # block i: azimuth rank i's channels
    y = recv.permute(4, 0, 5, 2, 3, 1).reshape(batch, channels, kernels, rows, width // azimuth)
    return torch.einsum("bckil,ock->boil", y, weight) + bias.view(1, -1, 1, 1)
