"""PKB 78 (magi1_tile_parallel_vae_decode) as PKB states it: every rank its own 16-channel latent, each tile decoded
from the latent of the rank PKB's split gives it, the decoded tiles and their fades in bfloat16 as PKB's reference
rounds them, PKB's tolerance (docs/pkb_compat.md).

PKB's harness draws every rank's own z (B, 16, 6, 90, 90) in bfloat16 whatever the dtype asked (seeded by rank), and
PKB's reference splits the tiles over the ranks by size (sorted by their latent crop's size, largest first; Python's
stable sort keeps equal sizes in tile order; rank r takes sorted positions r, r + W, ...). Each rank decodes its tiles
from its own z (trilinear upsampling in float32, channels 0..2 kept, rounded to bfloat16), the decoded tiles are
exchanged, and each tile is faded from its neighbours and assembled: so the video is made of tiles of different
latents, which tile from which rank's z being PKB's split. That is PKB's function on PKB's inputs, and the variant
states it. PKB fades in bfloat16, one position at a time with a Python ratio: before * (1 - i/blend) and tile *
(i/blend) are each rounded to bfloat16, then their sum. The golden does exactly that (it is what the task's `differs`
names) on tiles decoded in float64 and rounded to bfloat16, and the variant runs in bfloat16 only (PKB's z is
bfloat16 in every run).

Measured in one process (this statement's arithmetic with PKB's float32 decode, W = 2 and 4, PKB's rule): fading in
float32 instead of PKB's bfloat16 used up to 0.52 of PKB's tolerance at tiny (50 calls a world size) and 0.78 at
bench (4 calls); the other way round, against a golden fading in float64, PKB's own bfloat16 fades used up to 0.51
(tiny) and 0.85 (bench, 6 calls). Either golden leaves the other arithmetic a thin margin at bench; PKB's own, the
statement's, is the golden.
"""
from dataclasses import replace

import torch.nn.functional as F

from pkb_env.contract import Comm, Compute, Cost, Normal, PerRank
from pkb_env.tasks._pkb import PKB_VARIANT, pkb_rule, pkb_tolerance
from pkb_env.tasks.magi1_tile_parallel_vae_decode import spec as task
from pkb_env.tasks.magi1_tile_parallel_vae_decode.pkb.reference import pkb_fade, pkb_owners
from pkb_env.tasks.magi1_tile_parallel_vae_decode.reference import tile_starts

CHANNELS = 16
"""PKB's latent channels; the decode keeps channels 0..2."""


def golden(inputs, world):
    """Each tile decoded in float64 from the z of the rank PKB's split gives it and rounded to the dtype, faded with
    PKB's roundings (pkb_fade), assembled; the same video on every rank."""
    args = inputs[0]
    size = (args["tile_latent_min_length"], args["tile_latent_min_height"], args["tile_latent_min_width"])
    up = (args["temporal_upsample"], args["spatial_upsample"], args["spatial_upsample"])
    overlap = (args["temporal_tile_overlap_factor"], args["spatial_tile_overlap_factor"],
               args["spatial_tile_overlap_factor"])
    z = args["z"]
    starts = tile_starts(z, size, overlap)
    owner = {index: r for r, indices in enumerate(pkb_owners(z, size, overlap, world.world_size)) for index in indices}
    stride = [int(n * (1 - o)) for n, o in zip(size, overlap)]
    blend = [int(n * u * o) for n, u, o in zip(size, up, overlap)]
    keep = [n * u - b for n, u, b in zip(size, up, blend)]
    decoded = {}
    for index, start in enumerate(starts):
        crop = inputs[owner[index]]["z"][:, :3, start[0]:start[0] + size[0], start[1]:start[1] + size[1],
                                         start[2]:start[2] + size[2]]
        decoded[start] = F.interpolate(crop.double(), scale_factor=up, mode="trilinear",
                                       align_corners=False).to(z.dtype)
    video = z.new_empty((z.shape[0], 3) + tuple(n * u for n, u in zip(z.shape[2:], up)))
    for start in starts:
        tile = decoded[start].clone()
        for axis in range(3):
            if start[axis] > 0:
                before = list(start)
                before[axis] -= stride[axis]
                pkb_fade(tile, decoded[tuple(before)], 2 + axis, blend[axis])
        at = [start[a] // stride[a] * keep[a] for a in range(3)]
        tile = tile[..., :keep[0], :keep[1], :keep[2]]
        video[:, :, at[0]:at[0] + tile.shape[2], at[1]:at[1] + tile.shape[3], at[2]:at[2] + tile.shape[4]] = tile
    return [video] * world.world_size


def _crop_lengths(n: int, size: int, stride: int) -> int:
    """The latent positions of every tile along one axis together (tiles overlap, the last is cut short)."""
    return sum(min(size, n - start) for start in range(0, n, stride))


def cost(c):
    """Every rank needs every tile, each decoded from one rank's z: at least the latent crops of the tiles (channels
    0..2) gathered, the smaller of what a tile's decode needs and what it makes (the task's decode on every rank,
    from latents); the decode's 16 FLOPs per output element (a trilinear tap's 8 multiply-adds) shared over the
    ranks; every input and output once in HBM."""
    lengths = [_crop_lengths(c[n], c[s], int(c[s] * (1 - o))) for n, s, o in
               (("T", "LT", 0.0), ("H", "LH", task.OVERLAP), ("X", "LH", task.OVERLAP))]
    crops = c["B"] * 3 * lengths[0] * lengths[1] * lengths[2] * c.elem
    voxels = c["B"] * 3 * c["T"] * c["TU"] * c["H"] * c["SU"] * c["X"] * c["SU"]
    return Cost(comm=(Comm("all_gather", crops),), compute=(Compute(16 * voxels / c["W"], "vector"),),
                memory_bytes=c.io_bytes())


SPEC = replace(
    task.SPEC, name="pkb_env.tasks.magi1_tile_parallel_vae_decode.pkb",
    title=f"PKB 78 as PKB states it: {task.SPEC.title}",
    description="Every rank holds its own latent video z (B, 16, T, H, X) in bfloat16. Tiles of (LT, LH, LH) latent "
                "positions start every stride = int(size * (1 - overlap)) positions per axis (t slowest), cut short "
                "at the video's edge. PKB's split: the tiles sorted by their latent size, largest first (equal sizes "
                "in tile order), rank r taking sorted positions r, r + W, ...; a tile is decoded from its rank's z: "
                "channels 0..2, trilinear upsampling by (TU, SU, SU) (align_corners=False) in float32, rounded to "
                "bfloat16. Along t, then h, then w, a decoded tile's first blend = int(size * upsample * overlap) "
                "positions fade in from the last ones of the decoded tile before it: tile[i] = before[-blend + i] * "
                "(1 - i/blend) + tile[i] * i/blend, in bfloat16 as PKB computes it (each product rounded, then the "
                "sum). Each tile keeps its first size * upsample - blend positions per axis, placed at its tile "
                "index times that. Every rank must return the whole video (B, 3, T*TU, H*SU, X*SU) in bfloat16. "
                "Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) are correct.",
    inputs=tuple(replace(d, shape=("B", CHANNELS, *d.shape[2:]), dist=Normal(), layout=PerRank(),
                         doc="this rank's own latent video (PKB draws every rank's), 16 channels")
                 if d.name == "z" else d for d in task.SPEC.inputs),
    outputs=tuple(pkb_tolerance(o) for o in task.SPEC.outputs),
    golden=golden, cost=cost, clauses=(),
    presets={name: replace(p, dtype="bfloat16", note=f"{p.note} (bfloat16: PKB's z in every run)")
             for name, p in task.SPEC.presets.items()},
    dtypes=("bfloat16",), tolerance_rule=pkb_rule(("bfloat16",)),
    departures=(PKB_VARIANT,
                "every rank its own 16-channel z, as PKB draws them, each tile decoded from the z of the rank PKB's "
                "split (by size, round-robin) gives it (the task: one 3-channel z on every rank, so the split does "
                "not matter)",
                "the fades in bfloat16 with PKB's roundings (the task: in float32, rounded once)",
                "bfloat16 only: PKB's z is bfloat16 whatever the dtype asked"),
    reference_path=None, pkb=None)
PKB = replace(task.PKB, differs="", variant=None)
