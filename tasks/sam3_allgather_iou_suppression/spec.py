"""sam3_allgather_iou_suppression: gather every rank's tracked objects and suppress overlapping ones
(PKB 81).

SAM 3's video tracker splits the tracked objects over ranks; every frame, each rank gathers every rank's
low-resolution masks, scores and occlusion history (uneven counts), computes the masks' pairwise IoU and
suppresses the object of a heavily overlapping pair that was occluded more recently. The work is an
all-gather of uneven blocks (the counts first), a (total, S^2) x (S^2, total) GEMM of binary masks and a
few elementwise passes: the levers are one gather with the counts riding along (or no host sync at all),
gathering the logits in their own dtype, and binarising once.
"""
import torch

from pkb_env.contract import (Clause, Comm, Compute, Const, Cost, Custom, Edge, Exact, Group, Length, Normal,
                              Output, Preset, Replicated, TaskSpec, Tensor)

GRID = 16  # masks are boxes on a grid of GRID x GRID cells, so that heavy overlaps are common
TALL, SHORT = 10, 7  # the edge case's columns, in cells: IoU SHORT / TALL = 0.7 (the threshold)
CHAIN, LINK = 13, 9  # the chain's column (no box reaches it: boxes end by cell 10) and its objects' height


def boxes(gen, shape, dtype, env):
    """Logits of axis-aligned boxes on the cell grid (top-left cell in [0, 4), sides of 6 to 8 cells), of
    magnitude 0.25 to 4 (positive inside, negative outside, never 0)."""
    count, side = shape[0], shape[1]
    cell = side // GRID
    corner = torch.randint(0, 4, (count, 2), generator=gen, device=gen.device)
    extent = torch.randint(6, 9, (count, 2), generator=gen, device=gen.device)
    grid = torch.arange(side, device=gen.device) // cell
    rows = (grid[None, :] >= corner[:, :1]) & (grid[None, :] < (corner + extent)[:, :1])
    cols = (grid[None, :] >= corner[:, 1:]) & (grid[None, :] < (corner + extent)[:, 1:])
    inside = rows[:, :, None] & cols[:, None, :]
    magnitude = torch.rand(shape, generator=gen, device=gen.device) * 3.75 + 0.25
    return torch.where(inside, magnitude, -magnitude).to(dtype)


def iou_exactly_at_threshold(masks, draw):
    """Ranks pair up (2p, 2p + 1); object i of either rank of pair p becomes a one-cell-wide column in cell
    column 3p + i, 10 cells tall on the even rank and its first 7 cells on the odd one: each such pair of
    objects sits at IoU exactly 7/10 (= iou_threshold) and overlaps nothing else."""
    cell, rank = masks.shape[1] // GRID, draw.coords["world"]
    out = masks.abs()
    for i in range(masks.shape[0]):
        column, tall = 3 * (rank // 2) + i, TALL if rank % 2 == 0 else SHORT
        inside = torch.zeros(masks.shape[1:], dtype=torch.bool, device=masks.device)
        inside[2 * cell:(2 + tall) * cell, column * cell:(column + 1) * cell] = True
        out[i] = torch.where(inside, out[i], -out[i])
    return out


def overlap_chain(masks, draw):
    """Three objects in a chain, X, Y and Z (object j of rank j % W, j = 0, 1, 2: the count is 3 on every
    rank in this case): columns of LINK = 9 cells in cell column CHAIN, starting at rows 0, 1 and 2, so X-Y and
    Y-Z overlap at IoU 8/10 and X-Z at 7/11 < 0.7. Their occlusion frames rise along the chain
    (`occlusion_frames`), so X suppresses Y and Y suppresses Z: Z is suppressed by an object that is suppressed
    itself, which greedy suppression (a suppressed object suppresses nothing) keeps."""
    cell, rank, world = masks.shape[1] // GRID, draw.coords["world"], int(draw.env["W"])
    out = masks.clone()
    for j in range(3):
        if j % world != rank or j >= masks.shape[0]:
            continue
        inside = torch.zeros(masks.shape[1:], dtype=torch.bool, device=masks.device)
        inside[j * cell:(j + LINK) * cell, CHAIN * cell:(CHAIN + 1) * cell] = True
        out[j] = torch.where(inside, masks[j].abs(), -masks[j].abs())
    return out


def occlusion_frames(gen, shape, dtype, env, given):
    """The frame each object was last occluded at: -1 to 7 (-1: never), uniform, except where the edge case
    made the object a one-cell-wide column (no box is: their sides are 6-8 cells): 0-3 for a 10-cell column
    and 4-7 for a 7-cell one. So every pair the edge case puts at IoU exactly 0.7 differs in it, neither -1,
    and the rule decides the pair in every call that has the edge case (with uniform frames about one pair in
    three decided nothing, and a candidate that suppresses at IoU > 0.7 instead of >= passed some steps)."""
    masks = given.values["low_res_masks_local"]
    count, side = masks.shape[0], masks.shape[1]
    cell = side // GRID
    cells = (masks > 0).reshape(count, GRID, cell, GRID, cell).any(dim=4).any(dim=2)   # (count, GRID, GRID)
    width, height = cells.any(dim=1).sum(dim=1), cells.any(dim=2).sum(dim=1)
    frames = torch.randint(-1, 8, shape, generator=gen, device=gen.device)
    early = torch.randint(0, 4, shape, generator=gen, device=gen.device)
    frames = torch.where((width == 1) & (height == TALL), early, frames)
    frames = torch.where((width == 1) & (height == SHORT), early + 4, frames)
    top = cells.any(dim=2).int().argmax(dim=1)                      # the chain's links: rising frames
    frames = torch.where((width == 1) & (height == LINK), 3 * top + early % 2, frames)
    return frames.to(dtype)


def _suppressors(trial):
    """(total, total) bool: [i, j] where object i suppresses object j by the statement's rule, in float64."""
    masks, last = trial.cat("low_res_masks_local"), trial.cat("last_occluded_local")
    binary = (masks > 0).flatten(1).double()
    intersection = binary @ binary.T
    area = binary.sum(dim=1)
    iou = intersection / (area[:, None] + area[None, :] - intersection).clamp_min(1.0)
    over = (iou >= 0.7) & ~torch.eye(len(last), dtype=torch.bool)
    return over & (last[None, :] > last[:, None]) & (last[:, None] > -1), iou, last


def chain(trial) -> bool:
    """An object suppressed only by objects that are suppressed themselves."""
    by = _suppressors(trial)[0]
    suppressed = by.any(dim=0)
    return any(bool(suppressed[j]) and bool(suppressed[by[:, j]].all()) for j in range(len(suppressed)))


def at_threshold(trial) -> bool:
    """A pair at IoU exactly 0.7 that the rule decides (frames differ, neither -1)."""
    _, iou, last = _suppressors(trial)
    pairs = torch.triu(iou == 0.7, diagonal=1).nonzero().tolist()
    return any(last[i] >= 0 and last[j] >= 0 and last[i] != last[j] for i, j in pairs)


def golden(inputs, world):
    """Every rank's objects in rank order; IoU of the binary masks from integer pixel counts in float64 (with
    union <= S^2, a ratio that is not exactly 7/10 is at least 1 / (10 S^2) from it, so float64 decides as
    exact arithmetic does); the pair rule; the same outputs on every rank."""
    args = inputs[0]
    masks = torch.cat([a["low_res_masks_local"] for a in inputs]).float()
    scores = torch.cat([a["obj_scores_local"] for a in inputs]).float()
    last = torch.cat([a["last_occluded_local"] for a in inputs])
    binary = (masks > 0).flatten(1).double()
    intersection = binary @ binary.T
    area = binary.sum(dim=1)
    union = (area[:, None] + area[None, :] - intersection).clamp_min(1.0)
    overlaps = torch.triu(intersection / union >= args["iou_threshold"], diagonal=1)
    later = torch.lt if args["reverse"] else torch.gt
    li, lj = last[:, None], last[None, :]
    suppressed = (overlaps & later(li, lj) & (lj > -1)).any(dim=1) | (overlaps & later(lj, li) & (li > -1)).any(dim=0)
    masks[suppressed] = -10.0
    return [(masks.clone(), scores.clone(), suppressed.clone()) for _ in inputs]


def cost(c):
    """Per rank, at one object per rank (count's smallest): every rank's masks gathered in their own dtype
    (the logits are returned, so all of them must arrive), the binary masks' Gram matrix, the masks read
    once and the float32 masks of every rank written once."""
    total = c["W"]
    gathered = c["W"] * c.nbytes("low_res_masks_local")
    return Cost(comm=(Comm("all_gather", gathered),),
                compute=(Compute(2 * total * total * c["S"] * c["S"], "vector"),),
                memory_bytes=c.nbytes("low_res_masks_local") + total * c["S"] * c["S"] * 4)


SPEC = TaskSpec(
    name="sam3_allgather_iou_suppression",
    title="SAM 3 tracker: all-gather of uneven object masks and IoU suppression",
    description="Every rank holds count objects (1 to 3, its own, drawn per call; no rank knows the others'): "
                "low_res_masks_local (count, S, S) logits, obj_scores_local (count,) and last_occluded_local "
                "(count,) int64 (-1: never occluded). Over all ranks' objects in rank order (total of them), with "
                "binary masks logits > 0 and IoU = intersection / max(union, 1) of pixel counts: for every pair "
                "i < j with IoU >= iou_threshold, suppress i if last[i] > last[j] and last[j] > -1, and j if "
                "last[j] > last[i] and last[i] > -1 (reverse: < instead of >). Every rank must return (masks "
                "(total, S, S) float32 with every suppressed object's logits set to -10, scores (total,) float32, "
                "suppressed (total,) bool).",
    family="data",
    parallelism="data parallel over tracked objects: all-gather of uneven blocks, then a replicated decision",
    pkb_id=81,
    origin="SAM 3 video tracker (multi-GPU object suppression by mask IoU and occlusion history)",
    inputs=(
        Tensor("low_res_masks_local", ("count", "S", "S"), dist=Custom(boxes, "logits of boxes on a 16 x 16 cell "
               "grid (corner cells 0-3, sides 6-8 cells), magnitude 0.25-4, never 0"),
               doc="this rank's objects' mask logits"),
        Tensor("obj_scores_local", ("count",), dist=Normal(), doc="their scores"),
        Tensor("last_occluded_local", ("count",), dtype="int64",
               dist=Custom(occlusion_frames, "integers in [-1, 8) (for objects of the IoU edge case, 0-3 on one "
                           "rank of a pair and 4-7 on the other)", kinds=frozenset({"int"}),
                           reads=("low_res_masks_local",)),
               doc="the frame each object was last occluded at, -1 if never"),
        Const("iou_threshold", 0.7),
        Const("reverse", False),
        Group("group", "world", doc="the ranks tracking the objects"),
    ),
    lengths=(Length("count", 1, 4, doc="this rank's number of objects"),),
    outputs=(
        Output("masks", max_shape=("W * count", "S", "S"), dtype="float32", layout=Replicated(),
               doc="every rank's masks, suppressed ones set to -10"),
        Output("scores", max_shape=("W * count",), dtype="float32", layout=Replicated(), doc="every rank's scores"),
        Output("suppressed", max_shape=("W * count",), dtype="bool", layout=Replicated(),
               doc="which objects are suppressed"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=Exact("copies of the inputs, a constant, and a decision from integer pixel counts"),
    edges=(Edge("iou_at_threshold", "low_res_masks_local", iou_exactly_at_threshold,
                "pairs of objects across ranks at IoU exactly 0.7", everywhere=True),
           Edge("overlap_chain", "low_res_masks_local", overlap_chain, "a chain of three overlapping objects, "
                "each suppressing the next", everywhere=True, also=(("count", lambda count, draw: 3),))),
    clauses=(
        Clause("iou_at_least", "IoU >= iou_threshold: a pair at IoU exactly 0.7 that the occlusion frames decide",
               at_threshold, "edge case iou_at_threshold (one-cell columns of 10 and 7 cells)",
               edge="iou_at_threshold", applies=lambda x: x["W"] > 1, where="the pairs span two ranks"),
        Clause("every_pair", "every overlapping pair decides (not greedy): an object suppressed only by objects "
               "that are suppressed themselves", chain, "edge case overlap_chain (three 9-cell columns offset by "
               "a row, frames rising along the chain)", edge="overlap_chain"),
    ),
    presets={
        "tiny": Preset({"S": 32}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"S": 256}, "bfloat16", "PKB's shapes: 256 x 256 low-resolution masks, 1 to 3 objects per "
                        "rank"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-call, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to make its peers' masks without communicating)",
        "the counts are drawn per rank and call in 1..3 and are not an argument (PKB passes every rank's "
        "count, 1 + (rank + trial) % 3, as a list): a rank learns its peers' counts by communicating; so "
        "each rank holds its own objects' last_occluded (PKB passes the global vector, whose values follow "
        "the pattern i % 5 - 1, -1 to 3; here -1 to 7 drawn per call, so that more overlapping pairs differ in it)",
        "masks are boxes on a coarse grid, so IoUs of 0.7 and more are common and objects are suppressed; "
        "PKB's striped noise masks overlap at IoU ~0.5, so nothing was ever suppressed and a candidate "
        "skipping the decision passed; an edge case puts pairs at IoU exactly 0.7 (the >= of the rule), "
        "another a chain of three objects each suppressing the next (every pair decides: greedy suppression "
        "keeps the third)",
        "the IoU comparison is defined on exact pixel counts, which float32 and float64 decide alike at "
        "these sizes; the outputs are compared exactly (PKB: allclose at rtol 1e-2)",
        "the process group is an input the judge builds (PKB passes None for the world group)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("sam3_allgather_iou_suppression",
          differs="PKB passes every rank's object count (num_obj_per_gpu) and the global last_occluded; pkb-env's "
                  "ranks each hold their own count and last_occluded, and learn their peers' only by communicating",
          unmapped="PKB's arguments hold what this task's ranks must communicate to know")
