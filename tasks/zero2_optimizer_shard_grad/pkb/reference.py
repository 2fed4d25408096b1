import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(X: torch.Tensor, y: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor, W2: torch.Tensor,
             b2: torch.Tensor, exp_avg_part: torch.Tensor, exp_avg_sq_part: torch.Tensor, lr: float, beta1: float,
             beta2: float, eps: float, step: int) -> None:
    """One ZeRO-2 training step of the MLP out = relu(X W1^T + b1) W2^T + b2 with the mean squared error
    against y. Every rank holds its own rows of the batch, X (N/W, D) and y (N/W, O), the same
    parameters W1 (H, D), b1 (H,), W2 (O, H), b2 (O,); and Adam's moments of its shard r of the flat
    parameters (W1, b1, W2, b2 flattened and concatenated; P/W values a shard): every tensor in the task dtype,
    and the forward, backward and Adam run in it, as PKB's reference runs them. The
    gradients are reduce-scattered: each rank keeps only its shard of the gradient averaged over the ranks
    (the gradient of the loss over the whole batch). Each rank runs Adam (bias-corrected, `step` counted
    from 1) on its shard, updating its moments IN PLACE, and the updated shards are all-gathered so that
    every rank's W1, b1, W2, b2 are updated IN PLACE to the same values. Returns None (PKB's solution
    returns the updated state, which the judge reads in place)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    leaves = [p.detach().requires_grad_(True) for p in (W1, b1, W2, b2)]
    h = F.relu(F.linear(X, leaves[0], leaves[1]))
    F.mse_loss(F.linear(h, leaves[2], leaves[3]), y).backward()

    part = exp_avg_part.numel()
    g = torch.empty(part, dtype=X.dtype, device=X.device)
    dist.reduce_scatter_tensor(g, torch.cat([p.grad.reshape(-1) for p in leaves]))
    g /= world

    w = torch.cat([p.reshape(-1) for p in (W1, b1, W2, b2)])[rank * part:(rank + 1) * part]
    exp_avg_part.mul_(beta1).add_(g, alpha=1 - beta1)
    exp_avg_sq_part.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    m_hat = exp_avg_part / (1 - beta1 ** step)
    v_hat = exp_avg_sq_part / (1 - beta2 ** step)
    w = w - lr * m_hat / (v_hat.sqrt() + eps)

    flat = w.new_empty(world * part)
    dist.all_gather_into_tensor(flat, w)
    offset = 0
    for p in (W1, b1, W2, b2):
        p.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()
