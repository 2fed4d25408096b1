import torch
import torch.distributed as dist


def _exchange(send, counts, group):
    """All-to-all-v: counts[d] entries of `send` (grouped by destination) go to rank d; returns what
    arrived (grouped by source) and how many came from each rank."""
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    recv = send.new_empty(int(recv_counts.sum()))
    dist.all_to_all_single(recv, send, recv_counts.tolist(), counts.tolist(), group=group)
    return recv, recv_counts


def _hop(nodes, fanout, colptr, sorted_row, group):
    """Up to `fanout` in-neighbours of every node, sampled by the node's owner (rank node % W) from its
    partition; returns (src, dst), node by node in the order of `nodes`, neighbours in priority order."""
    world = dist.get_world_size(group)
    owner = nodes % world
    order = torch.sort(owner, stable=True).indices
    send_counts = torch.bincount(owner, minlength=world)
    requests, request_counts = _exchange(nodes[order], send_counts, group)
    # as the owner: the first min(degree, fanout) neighbours of each requested node
    local = requests // world
    start, degree = colptr[local], colptr[local + 1] - colptr[local]
    take = degree.clamp(max=fanout)
    first = torch.cumsum(take, 0) - take
    position = torch.arange(int(take.sum()), device=nodes.device) - first.repeat_interleave(take)
    sampled = sorted_row[start.repeat_interleave(take) + position]
    # back to the requesters: one count per request, then the neighbours
    got = take.new_empty(nodes.numel())
    dist.all_to_all_single(got, take, send_counts.tolist(), request_counts.tolist(), group=group)
    reply_counts = torch.stack([part.sum() for part in take.split(request_counts.tolist())])
    neighbours, _ = _exchange(sampled, reply_counts, group)
    # got[i] neighbours belong to nodes[order[i]]: restore the order of `nodes`
    slot = order.repeat_interleave(got)
    restore = torch.sort(slot, stable=True).indices
    return neighbours[restore], nodes[slot[restore]]


@torch.no_grad()
def solution(seeds, colptr, row, edge_priority, fanouts, group):
    """Two-hop neighbour sampling on a graph partitioned over the ranks (DGL's distributed sampler).

    Rank r owns the nodes v with v % W == r, its local node v // W; colptr (N + 1,) and row (E,) are the
    in-neighbours (global ids) of its N nodes in CSC form, edge_priority (E,) a random priority per edge.
    A node's sample is its min(degree, fanout) in-edges of lowest priority (ties: the lower edge position
    first), in that order. seeds (S,): this rank's seed nodes, owned anywhere. Hop 1 samples fanouts[0]
    for every seed in order; hop 2 fanouts[1] for every distinct hop-1 neighbour, in increasing id.
    Returns (src1, dst1, src2, dst2), int64: per hop, the sampled neighbour and its node, node by node.
    """
    segment = torch.repeat_interleave(torch.arange(colptr.numel() - 1, device=row.device), colptr.diff())
    by_priority = torch.sort(edge_priority, stable=True).indices
    by_node = torch.sort(segment[by_priority], stable=True).indices
    sorted_row = row[by_priority[by_node]]
    src1, dst1 = _hop(seeds, fanouts[0], colptr, sorted_row, group)
    src2, dst2 = _hop(torch.unique(src1), fanouts[1], colptr, sorted_row, group)
    return src1, dst1, src2, dst2
