import torch
import torch.distributed as dist


def solution(grad_shard: torch.Tensor, master_shard: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
             lr: float, beta1: float, beta2: float, eps: float, step: int) -> torch.Tensor:
    """One Adam step on this rank's shard of the flat parameters, then an all-gather of the updated
    parameters, every tensor in the task dtype and the step computed in it (as PKB's reference computes it).
    With m = beta1 * exp_avg + (1 - beta1) * g and v = beta2 * exp_avg_sq + (1 - beta2) * g^2, the updated
    weights are master - lr * m_hat / (sqrt(v_hat) + eps), where m_hat = m / (1 - beta1^step) and
    v_hat = v / (1 - beta2^step). Every rank returns every rank's updated weights (W*P,) in the task dtype, in
    rank order. The inputs are left unchanged."""
    m = exp_avg.mul(beta1).add_(grad_shard, alpha=1.0 - beta1)
    v = exp_avg_sq.mul(beta2).addcmul_(grad_shard, grad_shard, value=1.0 - beta2)
    m_hat = m / (1.0 - beta1 ** step)
    v_hat = v / (1.0 - beta2 ** step)
    updated = master_shard.add(m_hat.div(v_hat.sqrt().add(eps)).mul(-lr))
    gathered = updated.new_empty(dist.get_world_size() * updated.numel())
    dist.all_gather_into_tensor(gathered, updated)
    return gathered
