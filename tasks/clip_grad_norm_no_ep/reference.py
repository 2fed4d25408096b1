import torch
import torch.distributed as dist


def solution(grad_0: torch.Tensor, grad_1: torch.Tensor, grad_2: torch.Tensor, max_norm: float, norm_type: float,
             fsdp_group: dist.ProcessGroup) -> torch.Tensor:
    """Gradient clipping under FSDP2 (torchtitan's and VeOmni's clip_grad_norm_). Every rank of fsdp_group
    holds its shard of three gradients, grad_0, grad_1 and grad_2 (M, N) each: a block of rows of a full
    gradient (W*M, N). With p = norm_type, the total norm is the p-norm of every element of every gradient on
    every rank, total_norm = (sum |g|^p)^(1/p), accumulated in fp32. Every rank multiplies its three shards IN
    PLACE by coef = min(1, max_norm / total_norm) (the products in the gradients' dtype) and returns
    total_norm, a 0-dim fp32 tensor on the gradients' device."""
    grads = (grad_0, grad_1, grad_2)
    total = torch.zeros((), dtype=torch.float32, device=grad_0.device)
    for g in grads:
        total += torch.linalg.vector_norm(g, norm_type, dtype=torch.float32) ** norm_type
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=fsdp_group)
    total_norm = total ** (1.0 / norm_type)
    coef = (max_norm / total_norm).clamp(max=1.0)
    for g in grads:
        g.mul_(coef)
    return total_norm
