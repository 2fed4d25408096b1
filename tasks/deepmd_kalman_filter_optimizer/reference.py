import torch
import torch.distributed as dist


@torch.no_grad()
def solution(H, error, weights, P, kalman_lambda, kalman_nue, group):
    """DeePMD-kit's layer-wise Kalman filter optimizer step (LKF), the weight blocks split over `group`.

    Rank r holds `blocks` of the model's weight blocks of N values each: weights (blocks, N), the gradient
    of the prediction with respect to them H (blocks, N), and each block's covariance P (blocks, N, N),
    symmetric positive definite; error () is the prediction's error, the same on every rank; all float64.
    With lam = kalman_lambda, over every block i of every rank:
        a = 1 / sum_i (lam + H_i^T P_i H_i)
        K_i = P_i H_i;  weights_i + a * error * K_i;  P_i' = (P_i - a K_i K_i^T) / lam
    Returns (every rank's updated weights in rank order (W * blocks, N), this rank's P' (blocks, N, N),
    the next lambda, kalman_nue * lam + 1 - kalman_nue, a 0-dim tensor).
    """
    world = dist.get_world_size(group)
    gain = torch.bmm(P, H.unsqueeze(2)).squeeze(2)               # K_i = P_i H_i, (blocks, N)
    total = (kalman_lambda + (H * gain).sum(dim=1)).sum()         # my blocks' lam + H_i^T P_i H_i
    dist.all_reduce(total, group=group)
    a = 1.0 / total
    updated = weights + (a * error) * gain
    covariance = (P - a * gain.unsqueeze(2) * gain.unsqueeze(1)) / kalman_lambda
    everyone = torch.empty((world * weights.shape[0], weights.shape[1]), dtype=weights.dtype,
                           device=weights.device)
    dist.all_gather_into_tensor(everyone, updated, group=group)
    next_lambda = torch.tensor(kalman_nue * kalman_lambda + 1 - kalman_nue, dtype=weights.dtype,
                               device=weights.device)
    return everyone, covariance, next_lambda
