import torch
import torch.distributed as dist


def _exchange(send, counts, group):
    """All-to-all-v along dim 0: counts[d] rows of `send` (grouped by destination) go to rank d; returns
    what arrived, grouped by source, and how many rows came from each rank."""
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    recv = send.new_empty(int(recv_counts.sum()), *send.shape[1:])
    dist.all_to_all_single(recv, send, recv_counts.tolist(), counts.tolist(), group=group)
    return recv, recv_counts


@torch.no_grad()
def solution(shard, node_ids, proj, group):
    """Fetch node features from their owners and project them (GNN mini-batch input layer).

    shard (N, D): the features of the nodes this rank owns, rows [r N, (r + 1) N) of the global table;
    node_ids (T,) int64 in [0, W N): the nodes this rank needs; proj (D, P): the projection, the same on
    every rank. Returns features[node_ids] @ proj, (T, P), in the order of node_ids.
    """
    world = dist.get_world_size(group)
    owner = node_ids // shard.shape[0]
    order = torch.sort(owner, stable=True).indices
    requests, request_counts = _exchange(node_ids[order], torch.bincount(owner, minlength=world), group)
    rows, _ = _exchange(shard[requests - dist.get_rank(group) * shard.shape[0]], request_counts, group)
    fetched = torch.empty_like(rows)
    fetched[order] = rows
    return fetched @ proj
