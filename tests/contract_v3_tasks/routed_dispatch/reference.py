import torch
import torch.distributed as dist


def solution(x: torch.Tensor, topk_idx: torch.Tensor, send_counts: torch.Tensor, recv_counts: torch.Tensor,
             num_experts: int, ep_group) -> torch.Tensor:
    """MoE dispatch: send each (token, expert) pair's row of x to the rank of its expert group holding that
    expert (experts placed contiguously), ordered by destination, then token, then pick; return the rows this
    rank receives, ordered by source rank, then token, then pick."""
    ranks = dist.get_world_size(ep_group)
    dest = (topk_idx // (num_experts // ranks)).flatten()                 # (T * K,), token-major
    rows = x.repeat_interleave(topk_idx.shape[1], dim=0)[torch.argsort(dest, stable=True)]
    out = x.new_empty((int(recv_counts.sum()), x.shape[1]))
    dist.all_to_all_single(out, rows, recv_counts.tolist(), send_counts.tolist(), group=ep_group)
    return out
