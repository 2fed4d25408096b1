import torch
import torch.distributed as dist


@torch.no_grad()
def solution(idx, value, num_embeddings, group):
    """Sparse embedding exchange: send every (index, row) pair to the rank that owns the index.

    idx (T,) int64 in [0, num_embeddings): embedding rows this rank touched; value (T, D): a row per index
    (a sparse gradient). Rank s owns the indices [s * P, (s + 1) * P) with P = ceil(num_embeddings / W).
    Returns (recv_idx (n,), recv_value (n, D)): every pair whose index this rank owns, grouped by sending
    rank in rank order, each sender's pairs in their original order (n differs by rank and by call).
    """
    per_rank = -(-num_embeddings // dist.get_world_size(group))
    return send_to_owners(idx, value, idx // per_rank, group)


def send_to_owners(idx, value, owner, group):
    """Every pair to rank owner[i]: a stable sort by owner keeps each sender's order, the counts are exchanged to
    size the receive (a host sync), then indices and rows move in two all-to-all-v's."""
    world = dist.get_world_size(group)
    order = torch.sort(owner, stable=True).indices
    send_counts = torch.bincount(owner, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    recv_idx = idx.new_empty(sum(recv_splits))
    dist.all_to_all_single(recv_idx, idx[order], recv_splits, send_splits, group=group)
    recv_value = value.new_empty(sum(recv_splits), value.shape[1])
    dist.all_to_all_single(recv_value, value[order], recv_splits, send_splits, group=group)
    return recv_idx, recv_value
