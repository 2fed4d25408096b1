import torch
import torch.distributed as dist


def solution(grad_shard: torch.Tensor, master_shard: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
             lr: float, beta1: float, beta2: float, eps: float, step: int) -> torch.Tensor:
    """One Adam step on this rank's shard of the flat parameters, then an all-gather of the updated
    parameters (ZeRO / FSDP: each rank owns the optimiser state of its shard). Every rank holds its
    gradient shard (P,) in the model's dtype and the fp32 master weights, first and second moments of the
    same shard (P,). With m = beta1 * exp_avg + (1 - beta1) * g and v = beta2 * exp_avg_sq + (1 - beta2) * g^2,
    the updated weights are master - lr * m_hat / (sqrt(v_hat) + eps), where m_hat = m / (1 - beta1^step)
    and v_hat = v / (1 - beta2^step). Every rank returns every rank's updated weights (W*P,) fp32, in rank
    order. The inputs are left unchanged."""
    g = grad_shard.float()
    m = exp_avg * beta1 + g * (1 - beta1)
    v = exp_avg_sq * beta2 + g * g * (1 - beta2)
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    updated = master_shard - lr * m_hat / (v_hat.sqrt() + eps)
    gathered = updated.new_empty(dist.get_world_size() * updated.numel())
    dist.all_gather_into_tensor(gathered, updated)
    return gathered
