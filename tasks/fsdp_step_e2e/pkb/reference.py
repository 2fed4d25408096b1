import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(X: torch.Tensor, y: torch.Tensor, flat_param_shard: torch.Tensor, exp_avg_shard: torch.Tensor,
             exp_avg_sq_shard: torch.Tensor, hidden: int, lr: float, beta1: float, beta2: float, eps: float,
             weight_decay: float, step: int) -> None:
    """One FSDP training step with AdamW of the MLP out = relu(X W1^T + b1) W2^T + b2 with the mean squared
    error against y. Every rank holds its own rows of the batch, X (N/W, D) and y (N/W, O), and only
    its shard r (P/W values) of the flat parameters (W1 (hidden, D), b1 (hidden,),
    W2 (O, hidden), b2 (O,) flattened and concatenated in that order: P values) and of Adam's moments, every
    tensor in the task dtype, in which the whole step runs (as PKB's reference runs it). The ranks all-gather
    the flat parameters, run the forward and backward, reduce-scatter the flat
    gradient so that each rank holds its shard of the gradient averaged over the ranks (the gradient of the
    loss over the whole batch), and run AdamW on their shard: the moments and the parameter shard are
    updated IN PLACE (bias correction with `step` counted from 1; decoupled weight decay
    p -= lr * weight_decay * p on the parameters before the step). Returns None."""
    world = dist.get_world_size()
    d, o, part = X.shape[1], y.shape[1], flat_param_shard.numel()
    flat = flat_param_shard.new_empty(world * part)
    dist.all_gather_into_tensor(flat, flat_param_shard)
    leaves, offset = [], 0
    for shape in ((hidden, d), (hidden,), (o, hidden), (o,)):
        n = torch.Size(shape).numel()
        leaves.append(flat[offset:offset + n].view(shape).detach().requires_grad_(True))
        offset += n
    h = F.relu(F.linear(X, leaves[0], leaves[1]))
    F.mse_loss(F.linear(h, leaves[2], leaves[3]), y).backward()

    g = torch.empty_like(flat_param_shard)
    dist.reduce_scatter_tensor(g, torch.cat([p.grad.reshape(-1) for p in leaves]))
    g /= world

    exp_avg_shard.mul_(beta1).add_(g, alpha=1 - beta1)
    exp_avg_sq_shard.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    update = lr * (exp_avg_shard / (1 - beta1 ** step)) / ((exp_avg_sq_shard / (1 - beta2 ** step)).sqrt() + eps)
    flat_param_shard.mul_(1 - lr * weight_decay).sub_(update)
