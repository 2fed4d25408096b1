import torch
import torch.distributed as dist


def solution(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, max_norm):
    """Data-parallel Adam step: average the ranks' gradients, clip them to max_norm, update the moments and the
    parameters IN PLACE (every rank holds the same replica). Returns (the gradient norm before clipping as a
    Python float, None, and on rank 0 only a dict of statistics; None on the other ranks)."""
    g = grad.clone()
    dist.all_reduce(g)
    g /= dist.get_world_size()
    norm = float(torch.linalg.vector_norm(g))
    g *= min(1.0, max_norm / (norm + 1e-6))
    exp_avg.mul_(beta1).add_(g, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt().add_(eps)
    update = lr * (exp_avg / (1 - beta1 ** step)) / denom
    param.sub_(update)
    stats = None
    if dist.get_rank() == 0:
        stats = {"clipped": int(norm > max_norm), "max_update": update.abs().max()}
    return norm, None, stats
