import torch.distributed as dist


def solution(x, group):
    """Ulysses' all-gather into one tensor: every rank of `group` returns the (W*M, N) concatenation of all
    ranks' (M, N) blocks along dim 0, in rank order (rows r*M to (r+1)*M-1 from rank r)."""
    out = x.new_empty((dist.get_world_size(group) * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out
