import torch
import torch.distributed as dist

from pkb_env.tasks.magi1_tile_parallel_vae_decode.reference import tile_starts, tiled_decode


@torch.no_grad()
def solution(z, tile_latent_min_length, tile_latent_min_height, tile_latent_min_width,
             spatial_tile_overlap_factor, temporal_tile_overlap_factor, spatial_upsample, temporal_upsample, group):
    """PKB 78 as PKB states it (tasks/magi1_tile_parallel_vae_decode/pkb/spec.py): the task's tiled decode
    (tasks/magi1_tile_parallel_vae_decode/reference.py) of channels 0..2 of every rank's own z, each tile decoded
    on the rank PKB's split gives it (`pkb_owners`), the fades in z's dtype with PKB's roundings (`pkb_fade`)."""
    size = (tile_latent_min_length, tile_latent_min_height, tile_latent_min_width)
    overlap = (temporal_tile_overlap_factor, spatial_tile_overlap_factor, spatial_tile_overlap_factor)
    up = (temporal_upsample, spatial_upsample, spatial_upsample)
    z = z[:, :3]                                   # PKB decodes every channel and keeps the first three
    owners = pkb_owners(z, size, overlap, dist.get_world_size(group))
    return tiled_decode(z, size, overlap, up, group, owners, z.dtype, pkb_fade)


def pkb_owners(z, size, overlap, world):
    """PKB's split of the tiles: sorted by their latent crop's size, largest first (a stable sort: equal sizes in
    tile order), dealt round-robin, rank r taking sorted positions r, r + W, ..."""
    sizes = [min(n, z.shape[2 + a] - start[a]) for start in tile_starts(z, size, overlap)
             for a, n in enumerate(size)]
    volume = [sizes[i] * sizes[i + 1] * sizes[i + 2] for i in range(0, len(sizes), 3)]
    order = sorted(range(len(volume)), key=lambda i: volume[i], reverse=True)
    return [order[r::world] for r in range(world)]


def pkb_fade(tile, before, axis, extent):
    """PKB's fade in the tiles' dtype (in place): position i becomes before[-extent + i] * (1 - i/extent) +
    tile[i] * (i/extent), each product and the sum rounded to the dtype, as PKB's loop over positions computes it
    (with Python ratios, which torch applies in float32); bit-identical to that loop, in one pass."""
    extent = min(extent, tile.shape[axis], before.shape[axis])
    if extent == 0:
        return
    shape = [1] * tile.dim()
    shape[axis] = extent
    ratio = torch.arange(extent, dtype=torch.float64, device=tile.device) / extent
    head = tile.narrow(axis, 0, extent)
    faded = (before.narrow(axis, before.shape[axis] - extent, extent).float() * (1 - ratio).float().view(shape))
    kept = head.float() * ratio.float().view(shape)
    head.copy_((faded.to(tile.dtype).float() + kept.to(tile.dtype).float()).to(tile.dtype))
