import torch
import torch.distributed as dist


def solution(non_ep_grad: torch.Tensor, ep_grad: torch.Tensor, max_norm: float, norm_type: float, ep_size: int,
             fsdp_group: dist.ProcessGroup, ep_fsdp_group: dist.ProcessGroup,
             ep_group: dist.ProcessGroup) -> torch.Tensor:
    """Gradient clipping under FSDP2 with expert parallelism (VeOmni's EP-aware clip_grad_norm_). The ranks
    form an (ep, ep_fsdp) mesh. Every rank holds non_ep_grad (M, N), its FSDP shard (rank order over
    fsdp_group, every rank) of a dense parameter's gradient, and ep_grad (M, N), its shard of its experts'
    gradient: experts are split over ep_group, and each expert's rows over ep_fsdp_group. First, where
    ep_size > 1, ep_grad is divided by ep_size IN PLACE. With p = norm_type, the total norm is
    (sum of |g|^p over every rank's non_ep_grad + the same over every rank's divided ep_grad)^(1/p),
    accumulated in fp32. Every rank then multiplies both shards IN PLACE by coef = min(1, max_norm /
    total_norm) (the products in the gradients' dtype) and returns total_norm, a 0-dim fp32 tensor on the
    gradients' device."""
    if ep_size > 1:
        ep_grad.mul_(1.0 / ep_size)
    non_ep_total = torch.linalg.vector_norm(non_ep_grad, norm_type, dtype=torch.float32) ** norm_type
    dist.all_reduce(non_ep_total, op=dist.ReduceOp.SUM, group=fsdp_group)
    ep_total = torch.linalg.vector_norm(ep_grad, norm_type, dtype=torch.float32) ** norm_type
    dist.all_reduce(ep_total, op=dist.ReduceOp.SUM, group=ep_fsdp_group)
    dist.all_reduce(ep_total, op=dist.ReduceOp.SUM, group=ep_group)
    total_norm = (non_ep_total + ep_total) ** (1.0 / norm_type)
    coef = (max_norm / total_norm).clamp(max=1.0)
    non_ep_grad.mul_(coef)
    ep_grad.mul_(coef)
    return total_norm
