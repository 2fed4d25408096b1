import torch
import torch.distributed as dist

NO_OBJECT_LOGIT = -10.0


@torch.no_grad()
def solution(low_res_masks_local, obj_scores_local, last_occluded_local, iou_threshold, reverse, group):
    """SAM 3's video tracker, objects split over the ranks of `group`: every rank gathers every rank's object
    masks, scores and last-occluded frames (in rank order), and suppresses objects that overlap another.

    low_res_masks_local (count, S, S) logits, obj_scores_local (count,), last_occluded_local (count,) int64
    (-1: never occluded); count differs by rank (1 to 3) and no rank knows the others'. An object's binary
    mask is logits > 0; the IoU of two objects is intersection / union of pixel counts (union clamped to at
    least 1). For every pair i < j with IoU >= iou_threshold: i is suppressed if last[i] > last[j] and
    last[j] > -1, j if last[j] > last[i] and last[i] > -1 (with reverse, < instead of >). Suppressed objects'
    logits become -10. Returns (masks (total, S, S) float32, scores (total,) float32, suppressed (total,)
    bool), the same on every rank. The counts are read on the host: they size the gathers.
    """
    world, device = dist.get_world_size(group), low_res_masks_local.device
    count = low_res_masks_local.shape[0]
    counts = torch.empty(world, dtype=torch.int64, device=device)
    dist.all_gather_into_tensor(counts, torch.tensor([count], device=device), group=group)
    counts = counts.tolist()
    most = max(counts)

    # masks and scores in one float32 row per object, padded to the largest count (gloo gathers equal blocks)
    rows = torch.zeros((most, low_res_masks_local[0].numel() + 1), dtype=torch.float32, device=device)
    rows[:count, :-1] = low_res_masks_local.flatten(1).float()
    rows[:count, -1] = obj_scores_local.float()
    last = torch.full((most,), -1, dtype=torch.int64, device=device)
    last[:count] = last_occluded_local
    all_rows = rows.new_empty((world * most, rows.shape[1]))
    all_last = last.new_empty(world * most)
    dist.all_gather_into_tensor(all_rows, rows, group=group)
    dist.all_gather_into_tensor(all_last, last, group=group)
    keep = torch.cat([torch.arange(r * most, r * most + c, device=device) for r, c in enumerate(counts)])
    masks = all_rows[keep, :-1].reshape(-1, *low_res_masks_local.shape[1:])
    scores = all_rows[keep, -1].contiguous()
    last = all_last[keep]

    binary = (masks > 0).flatten(1).float()
    intersection = binary @ binary.T                   # pixel counts: exact in float32
    area = binary.sum(dim=1)
    union = (area[:, None] + area[None, :] - intersection).clamp_min(1.0)
    overlaps = torch.triu(intersection / union >= iou_threshold, diagonal=1)
    later = torch.lt if reverse else torch.gt
    li, lj = last[:, None], last[None, :]
    suppressed = (overlaps & later(li, lj) & (lj > -1)).any(dim=1) | (overlaps & later(lj, li) & (li > -1)).any(dim=0)
    masks[suppressed] = NO_OBJECT_LOGIT
    return masks, scores, suppressed
