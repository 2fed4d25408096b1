import torch
import torch.distributed as dist


@torch.no_grad()
def solution(values, group):
    """A distributed sample sort: every rank of `group` returns its slice of all ranks' values sorted ascending,
    the slices exactly balanced.

    values (n,): n differs by rank and call, and may be 0 (a rank with no values). With T values over all W
    ranks, rank r returns the sorted positions [r * (T // W) + min(r, T % W), (r + 1) * (T // W) + min(r + 1,
    T % W)): the first T % W ranks hold one value more. Steps: sort locally; gather W regular samples per
    rank (+inf on an empty rank) and take W - 1 splitters from the finite ones; send every value to the
    rank whose splitter range holds it (equal values to the same rank); sort what arrived; then move the
    buckets' values to their exact positions. The send and receive counts are read on the host: they size
    the exchanges.
    """
    world, me = dist.get_world_size(group), dist.get_rank(group)
    local = values.sort().values
    n = local.numel()
    device = local.device
    if n:
        picks = ((torch.arange(1, world + 1, device=device) * n) // world - 1).clamp(min=0)
        samples = local[picks]
    else:
        samples = torch.full((world,), float("inf"), dtype=local.dtype, device=device)
    everyone = samples.new_empty(world * world)
    dist.all_gather_into_tensor(everyone, samples, group=group)
    everyone = everyone.sort().values
    usable = torch.isfinite(everyone).sum()
    splitters = everyone[((torch.arange(1, world, device=device) * usable) // world - 1).clamp(min=0)]

    # bucket j holds the values in (splitter j-1, splitter j]: ties always land in one bucket
    ends = torch.searchsorted(local, splitters, right=True)
    bounds = torch.cat([ends.new_zeros(1), ends, ends.new_full((1,), n)])
    send = bounds.diff()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    send, recv = send.tolist(), recv.tolist()
    bucket = local.new_empty(sum(recv))
    dist.all_to_all_single(bucket, local, recv, send, group=group)
    bucket = bucket.sort().values

    # exact balance: bucket s covers global positions [start_s, start_s + size_s); rank d takes its target range
    sizes = torch.empty(world, dtype=torch.int64, device=device)
    dist.all_gather_into_tensor(sizes, torch.tensor([bucket.numel()], device=device), group=group)
    sizes = sizes.tolist()
    total, starts = sum(sizes), [sum(sizes[:s]) for s in range(world)]
    base, extra = divmod(total, world)
    targets = [d * base + min(d, extra) for d in range(world + 1)]

    def overlap(s, d):
        return max(0, min(starts[s] + sizes[s], targets[d + 1]) - max(starts[s], targets[d]))

    out = bucket.new_empty(targets[me + 1] - targets[me])
    dist.all_to_all_single(out, bucket, [overlap(s, me) for s in range(world)],
                           [overlap(me, d) for d in range(world)], group=group)
    return out
