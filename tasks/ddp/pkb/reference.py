import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(X: torch.Tensor, y: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor, W2: torch.Tensor,
             b2: torch.Tensor, exp_avg_W1: torch.Tensor, exp_avg_b1: torch.Tensor, exp_avg_W2: torch.Tensor,
             exp_avg_b2: torch.Tensor, exp_avg_sq_W1: torch.Tensor, exp_avg_sq_b1: torch.Tensor,
             exp_avg_sq_W2: torch.Tensor, exp_avg_sq_b2: torch.Tensor, lr: float, beta1: float, beta2: float,
             eps: float, step: int) -> None:
    """One data-parallel (DDP) training step with Adam of the MLP out = relu(X W1^T + b1) W2^T + b2 with the
    mean squared error against y. Every rank holds its own rows of the batch, X (N/W, D) and y (N/W, O), and
    the same replica of the parameters W1 (H, D), b1 (H,), W2 (O, H), b2 (O,) and of Adam's moments of each
    (exp_avg_*, exp_avg_sq_*), every tensor in the task dtype. The forward, backward and Adam run in that dtype,
    as PKB's reference runs them; the
    gradients are averaged over the ranks (the gradient of the loss over the whole batch); then Adam with
    bias correction (`step` counted from 1) updates every moment and every parameter IN PLACE, identically on
    every rank. Returns None."""
    params = (W1, b1, W2, b2)
    leaves = [p.detach().requires_grad_(True) for p in params]
    h = F.relu(F.linear(X, leaves[0], leaves[1]))
    F.mse_loss(F.linear(h, leaves[2], leaves[3]), y).backward()

    grad = torch.cat([p.grad.reshape(-1) for p in leaves])
    dist.all_reduce(grad)
    grad /= dist.get_world_size()

    bc1, bc2 = 1 - beta1 ** step, 1 - beta2 ** step
    offset = 0
    for p, m, v in zip(params, (exp_avg_W1, exp_avg_b1, exp_avg_W2, exp_avg_b2),
                       (exp_avg_sq_W1, exp_avg_sq_b1, exp_avg_sq_W2, exp_avg_sq_b2)):
        g = grad[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        p.sub_(lr * (m / bc1) / ((v / bc2).sqrt() + eps))
