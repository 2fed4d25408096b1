import torch
import torch.distributed as dist


@torch.no_grad()
def solution(teacher_output, teacher_temp, n_iterations, group):
    """DINOv2's Sinkhorn-Knopp centering of the teacher's scores, samples split over the ranks of `group`.

    teacher_output (rows, K): this rank's samples' scores over K prototypes; rows differ by rank, and every
    step runs in float32. Q = exp(scores / teacher_temp) over every rank's samples, scaled to total 1; then n_iterations times: divide each prototype's column by its sum
    over all samples of every rank and by K, then each sample's row by its own sum and by B, the number of
    samples over all ranks. Finally multiply by B (each sample's row sums to 1). Returns this rank's rows,
    (rows, K) float32.
    """
    q = torch.exp(teacher_output.float() / teacher_temp)
    total = torch.tensor([q.shape[0]], dtype=q.dtype, device=q.device)  # samples, then over every rank
    dist.all_reduce(total, group=group)
    mass = q.sum()
    dist.all_reduce(mass, group=group)
    q = q / mass
    prototypes = q.shape[1]
    for _ in range(n_iterations):
        per_prototype = q.sum(dim=0, keepdim=True)
        dist.all_reduce(per_prototype, group=group)
        q = q / per_prototype / prototypes
        q = q / q.sum(dim=1, keepdim=True) / total
    return q * total
