import torch
import torch.distributed as dist
import torch.nn.functional as F


def _fade_in(tile, before, axis, extent):
    """The first `extent` positions of `tile` along `axis` fade from the last `extent` of `before` (in place):
    position i keeps i / extent of the tile and 1 - i / extent of the tile before it."""
    extent = min(extent, tile.shape[axis], before.shape[axis])
    if extent == 0:
        return
    shape = [1] * tile.dim()
    shape[axis] = extent
    ramp = (torch.arange(extent, device=tile.device, dtype=tile.dtype) / extent).view(shape)
    head = tile.narrow(axis, 0, extent)
    head.copy_(before.narrow(axis, before.shape[axis] - extent, extent) * (1 - ramp) + head * ramp)


@torch.no_grad()
def solution(z, tile_latent_min_length, tile_latent_min_height, tile_latent_min_width,
             spatial_tile_overlap_factor, temporal_tile_overlap_factor, spatial_upsample, temporal_upsample, group):
    """MAGI-1's tile-parallel VAE decode: overlapping latent tiles decoded on different ranks, blended, assembled.

    z (B, C, T, H, X) is the latent video, the same on every rank. Tiles of (length, height, width) latent
    positions start every stride = int(size * (1 - overlap)) positions along each axis (t slowest, then h,
    then w); a tile at the end is cut short by the video's edge. Decoding a tile is trilinear upsampling by
    (temporal_upsample, spatial_upsample, spatial_upsample) (align_corners=False) computed in float32 and
    rounded to z's dtype. Along each axis in turn (t, h, w), a decoded tile's first
    blend = int(size * upsample * overlap) positions fade in from the last ones of the decoded tile before
    it on that axis: tile[i] = before[-blend + i] * (1 - i/blend) + tile[i] * (i/blend). Each tile then keeps
    its first size * upsample - blend positions per axis, placed at tile index * that size. Tiles are
    decoded round-robin over the ranks and all-gathered; every rank blends them all and returns the whole
    video (B, C, T * temporal_upsample, H * spatial_upsample, X * spatial_upsample) in z's dtype.
    """
    size = (tile_latent_min_length, tile_latent_min_height, tile_latent_min_width)
    overlap = (temporal_tile_overlap_factor, spatial_tile_overlap_factor, spatial_tile_overlap_factor)
    up = (temporal_upsample, spatial_upsample, spatial_upsample)
    count, world = len(tile_starts(z, size, overlap)), dist.get_world_size(group)
    return tiled_decode(z, size, overlap, up, group, [range(r, count, world) for r in range(world)],
                        torch.float32, _fade_in)


def tile_starts(z, size, overlap):
    """Every tile's latent start (t, h, w), t slowest, one every int(size * (1 - overlap)) positions per axis."""
    stride = [int(n * (1 - o)) for n, o in zip(size, overlap)]
    return [(t, h, w) for t in range(0, z.shape[2], stride[0]) for h in range(0, z.shape[3], stride[1])
            for w in range(0, z.shape[4], stride[2])]


def tiled_decode(z, size, overlap, up, group, owners, blend_dtype, fade):
    """The decode above with the tiles' owners given: owners[r] lists the indices (into tile_starts) of the tiles
    rank r decodes from its z, all-gathered in slots of the largest tile; every rank fades each tile in
    `blend_dtype` with `fade(tile, before, axis, extent)` (in place) and assembles the video in z's dtype."""
    rank = dist.get_rank(group)
    tiles = tile_starts(z, size, overlap)
    stride = [int(n * (1 - o)) for n, o in zip(size, overlap)]
    blend = [int(n * u * o) for n, u, o in zip(size, up, overlap)]
    keep = [n * u - b for n, u, b in zip(size, up, blend)]

    def decode(start):
        crop = z[:, :, start[0]:start[0] + size[0], start[1]:start[1] + size[1], start[2]:start[2] + size[2]]
        return F.interpolate(crop.float(), scale_factor=up, mode="trilinear", align_corners=False).to(z.dtype)

    slots = max(len(mine) for mine in owners)  # tiles per rank, the ranks with fewer padded
    mine = z.new_zeros((slots,) + tuple(z.shape[:2]) + tuple(n * u for n, u in zip(size, up)))
    for slot, index in enumerate(owners[rank]):
        tile = decode(tiles[index])
        mine[slot, :, :, :tile.shape[2], :tile.shape[3], :tile.shape[4]] = tile
    gathered = z.new_empty((len(owners) * slots,) + tuple(mine.shape[1:]))
    dist.all_gather_into_tensor(gathered, mine, group=group)
    decoded = {}
    for owner, indices in enumerate(owners):
        for slot, index in enumerate(indices):
            start = tiles[index]
            extent = [min(size[a], z.shape[2 + a] - start[a]) * up[a] for a in range(3)]
            decoded[start] = gathered[owner * slots + slot][..., :extent[0], :extent[1], :extent[2]]
    out = z.new_empty(tuple(z.shape[:2]) + tuple(n * u for n, u in zip(z.shape[2:], up)))
    for start in tiles:
        tile = decoded[start].to(blend_dtype, copy=True)
        for axis in range(3):
            if start[axis] > 0:
                before = list(start)
                before[axis] -= stride[axis]
                fade(tile, decoded[tuple(before)].to(blend_dtype), 2 + axis, blend[axis])
        at = [start[a] // stride[a] * keep[a] for a in range(3)]
        tile = tile[..., :keep[0], :keep[1], :keep[2]]
        out[:, :, at[0]:at[0] + tile.shape[2], at[1]:at[1] + tile.shape[3], at[2]:at[2] + tile.shape[4]] = tile
    return out
