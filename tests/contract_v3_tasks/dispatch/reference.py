import torch
import torch.distributed as dist


def solution(x, weight, expert, scores, k):
    """MoE-style dispatch: every rank holds T tokens x (T, D), their gate weights (T,) and the rank of their
    expert (T,). Every rank returns the rows x * weight of the tokens routed to it (any order), their global
    ids (source rank * T + row, in the same order), and, for its own tokens, the indices of the k highest
    integer scores (T, E) per token, ties broken by the lower index."""
    world, rank, tokens = dist.get_world_size(), dist.get_rank(), x.shape[0]
    ids = torch.arange(tokens) + rank * tokens
    order = torch.argsort(expert, stable=True)
    send = torch.bincount(expert, minlength=world)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    rows = x.new_empty(int(recv.sum()), x.shape[1])
    got = ids.new_empty(int(recv.sum()))
    dist.all_to_all_single(rows, (x * weight[:, None])[order], recv.tolist(), send.tolist())
    dist.all_to_all_single(got, ids[order], recv.tolist(), send.tolist())
    top = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    return rows, got, top
