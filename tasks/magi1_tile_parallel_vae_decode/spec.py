"""magi1_tile_parallel_vae_decode: MAGI-1's tile-parallel VAE decode of a latent video, overlapping tiles
decoded on different ranks, blended with their neighbours and assembled on every rank (PKB 78).

MAGI-1 decodes long, high-resolution videos in overlapping spatio-temporal tiles spread over the ranks:
each rank decodes its share of the tiles, the decoded tiles are exchanged, each tile's leading edge fades
in from the tile before it along each axis, and every rank ends with the whole video. As in PKB, the
decoder here is a stand-in, trilinear upsampling (8x in space, 4x in time at bench), so decoding is cheap
beside moving decoded tiles: the bound (no exchange at all: every rank may decode every tile itself) says
so. The levers are exchanging nothing (or only latents), decoding only the kept and blended regions, and
fusing the upsampling, the fades and the assembly into one pass that writes the video once.
"""
import torch
import torch.nn.functional as F

from pkb_env.contract import Clause, Compute, Const, Cost, Group, Output, Preset, Replicated, Rounded, TaskSpec, Tensor

OVERLAP = 0.25
"""Spatial tile overlap (PKB's); the temporal overlap is 0.0."""


def _tiles(z, size, up, overlap):
    """Every tile's decoded values in float64 (no rounding), keyed by its latent start (t, h, w)."""
    stride = [int(n * (1 - o)) for n, o in zip(size, overlap)]
    out = {}
    for t in range(0, z.shape[2], stride[0]):
        for h in range(0, z.shape[3], stride[1]):
            for w in range(0, z.shape[4], stride[2]):
                crop = z[:, :, t:t + size[0], h:h + size[1], w:w + size[2]]
                out[(t, h, w)] = F.interpolate(crop, scale_factor=up, mode="trilinear", align_corners=False)
    return out, stride


def cut_short(trial) -> bool:
    """A tile along h or w that the video's edge cuts short (the last tile's start plus its size passes it)."""
    args = trial.inputs[0]
    size, stride = args["tile_latent_min_height"], int(args["tile_latent_min_height"] * (1 - OVERLAP))
    return any(start + size > args["z"].shape[axis] for axis in (3, 4)
               for start in range(0, args["z"].shape[axis], stride))


def golden(inputs, world):
    """The tiles decoded, faded and assembled in float64 in one process, rounded once; the same video on every
    rank."""
    z = world.assemble(inputs, "z")
    args = inputs[0]
    size = (args["tile_latent_min_length"], args["tile_latent_min_height"], args["tile_latent_min_width"])
    up = (args["temporal_upsample"], args["spatial_upsample"], args["spatial_upsample"])
    overlap = (args["temporal_tile_overlap_factor"], args["spatial_tile_overlap_factor"],
               args["spatial_tile_overlap_factor"])
    decoded, stride = _tiles(z.double(), size, up, overlap)
    blend = [int(n * u * o) for n, u, o in zip(size, up, overlap)]
    keep = [n * u - b for n, u, b in zip(size, up, blend)]
    video = torch.zeros(z.shape[:2] + tuple(n * u for n, u in zip(z.shape[2:], up)), dtype=torch.float64)
    for start, tile in decoded.items():
        tile = tile.clone()
        for axis in range(3):
            if start[axis] == 0:
                continue
            before = list(start)
            before[axis] -= stride[axis]
            prev = decoded[tuple(before)]
            e = min(blend[axis], tile.shape[2 + axis], prev.shape[2 + axis])
            for i in range(e):
                cur = tile.select(2 + axis, i)
                cur.copy_(prev.select(2 + axis, prev.shape[2 + axis] - e + i) * (1 - i / e) + cur * (i / e))
        at = [start[a] // stride[a] * keep[a] for a in range(3)]
        tile = tile[..., :keep[0], :keep[1], :keep[2]]
        video[:, :, at[0]:at[0] + tile.shape[2], at[1]:at[1] + tile.shape[3], at[2]:at[2] + tile.shape[4]] = tile
    return world.distribute(video.to(z.dtype), "video")


def cost(c):
    """No exchange is needed: z is on every rank, so a rank may decode every tile itself (the decoder is
    cheap); at least the video's 16 FLOPs per output element (a trilinear tap's 8 multiply-adds) shared over
    the ranks, on CUDA cores (a lower bound whichever ranks decode); every input and output once in HBM (each
    rank writes the whole video)."""
    voxels = c["B"] * 3 * c["T"] * c["TU"] * c["H"] * c["SU"] * c["X"] * c["SU"]
    return Cost(comm=(), compute=(Compute(16 * voxels / c["W"], "vector"),), memory_bytes=c.io_bytes())


# Every output is a convex combination (interpolation weights, then fade weights) of latent values, which are
# unit normals: the decoded tiles are rounded once to the dtype, a relative error u on values whose tails
# reach ~4; a kernel may round a fade too. Measured at tiny (20 trials, W = 2, 4, 8): the reference errs by
# at most 3.5 u (bf16, fp16) against the float64 golden; a first rule of Rounded(4, 4) (56 u) left it at
# 0.06 of the allowance, too loose; Rounded(2, 2) allows 18 u. The final rounding is the rtol's.
TOLERANCE = Rounded(2, 2, what="the decoded tile and one fade rounded to the dtype, on values with tails ~4")

SPEC = TaskSpec(
    name="magi1_tile_parallel_vae_decode",
    title="MAGI-1 tile-parallel VAE decode (overlapping tiles blended across ranks)",
    description="z (B, 3, T, H, X), a latent video, is the same on every rank. Tiles of (LT, LH, LH) latent "
                "positions start every stride = int(size * (1 - overlap)) positions per axis (t slowest), cut "
                "short at the video's edge; decoding a tile is trilinear upsampling by (TU, SU, SU) "
                "(align_corners=False) in float32, rounded to z's dtype. Along t, then h, then w, a decoded "
                "tile's first blend = int(size * upsample * overlap) positions fade in from the last ones of "
                "the decoded tile before it: tile[i] = before[-blend + i] * (1 - i/blend) + tile[i] * i/blend. "
                "Each tile keeps its first size * upsample - blend positions per axis, placed at its tile index "
                "times that. Every rank must return the whole video (B, 3, T*TU, H*SU, X*SU) in z's dtype.",
    family="spatial",
    parallelism="spatial (tile) parallel: tiles decoded on different ranks, exchanged, blended with their "
                "neighbours, the whole video on every rank",
    pkb_id=78,
    origin="MAGI-1 (Sand AI) tile-parallel VAE decoding (tiled_decode with tile blending), decoder stood in by "
           "trilinear upsampling as in PKB",
    inputs=(
        Tensor("z", ("B", 3, "T", "H", "X"), layout=Replicated(), doc="the latent video (the channels decoded)"),
        Const("tile_latent_min_length", dim="LT", doc="a tile's latent frames"),
        Const("tile_latent_min_height", dim="LH", doc="a tile's latent rows"),
        Const("tile_latent_min_width", dim="LH", doc="a tile's latent columns"),
        Const("spatial_tile_overlap_factor", OVERLAP),
        Const("temporal_tile_overlap_factor", 0.0),
        Const("spatial_upsample", dim="SU"),
        Const("temporal_upsample", dim="TU"),
        Group("group", "world", doc="the ranks the tiles are decoded on"),
    ),
    outputs=(Output("video", ("B", 3, "T * TU", "H * SU", "X * SU"), layout=Replicated(), identical=True,
                    doc="the decoded video, the same bits on every rank"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(Clause("cut_short", "tiles cut short at the video's edge: a tile whose start plus its size passes "
                    "the latent's height or width", cut_short,
                    "the preset's sizes (7 x 7 latents, tiles of 4 every 3)"),),
    presets={
        "tiny": Preset({"B": 1, "T": 2, "H": 7, "X": 7, "LT": 1, "LH": 4, "SU": 2, "TU": 2}, "float32",
                       "CPU ranks, milliseconds: 18 tiles of 1 x 4 x 4 latents, the last row and column of tiles "
                       "cut short"),
        "bench": Preset({"B": 1, "T": 6, "H": 90, "X": 90, "LT": 3, "LH": 32, "SU": 8, "TU": 4}, "bfloat16",
                        "PKB's shapes: a 6 x 90 x 90 latent video in 32 tiles of 3 x 32 x 32, decoded to 24 x 720 x "
                        "720 (75 MiB of bf16 per rank); decoded tiles of 4.5 MiB each"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "z has the 3 channels the decode reads (PKB draws 16 and keeps channels 0..2 of each decoded tile) and "
        "is the same on every rank from a secret shared seed (PKB seeds each rank with 42 + rank + trial, so "
        "its ranks decode tiles of different latents and its video mixes them: a video of no latent)",
        "tiles go round-robin by index (PKB sorts them by size first; the result does not depend on it), are "
        "all-gathered once, and every rank fades and assembles them all (PKB all-gathers the decoded tiles, "
        "fades its own, and all-gathers again); the fades run in float32 on the rounded tiles and the video "
        "is rounded once (PKB fades in bf16 one column at a time in Python loops)",
        "no sr_ratio and first_frame_as_image arguments (PKB passes 1 and False); the process group is an "
        "input the judge builds; the outputs are compared at a tolerance, not PKB's 1e-2 for every problem",
        "the video must be bit-identical on every rank (identical=True): every rank holds the same frames",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Harness, Pkb, Ret  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("magi1_tile_parallel_vae_decode",
          params=(Arg("z"), Arg("tile_latent_min_length"), Arg("tile_latent_min_height"), Arg("tile_latent_min_width"),
                  Arg("spatial_tile_overlap_factor"), Arg("temporal_tile_overlap_factor"), Arg("spatial_upsample"),
                  Arg("temporal_upsample"), Harness("sr_ratio", 1), Harness("first_frame_as_image", False),
                  Arg("group")),
          returns=(Ret("video", fn=lambda video, call: video.to(call.values["z"].dtype),
                       text="in z's dtype (PKB returns bfloat16 whatever z's)"),),
          differs="pkb-env blends the tiles in float32 (docs/tasks.md); PKB casts to bfloat16 and fades in it, "
                  "column by column", variant="pkb")
