import torch
import torch.distributed as dist

# Per-iteration (a, b, c) of the quintic Newton-Schulz map X -> a X + b (X X^T) X + c (X X^T)^2 X, tuned to
# push every singular value into ~[0.7, 1.2] in five iterations (the "quintic" schedule).
QUINTIC = ((4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
           (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012))


def solution(x, steps, group):
    """Muon's orthogonalization of a weight update whose columns are split over a tensor-parallel group.

    x (R, C/W): this rank's block of columns of the global update X (R, C), R <= C.
    Newton-Schulz drives X towards U V^T (its polar factor): X is scaled by its global Frobenius norm,
    then each iteration forms the Gram X X^T (R, R), which sums over the column blocks (an all-reduce),
    and updates every block locally, X <- a X + (b G + c G^2) X. Computed in float32.
    Returns (R, C/W) in x's dtype: this rank's columns of the orthogonalized update.
    """
    work = x.float()
    norm_sq = (work * work).sum()
    dist.all_reduce(norm_sq, group=group)
    work = work / norm_sq.sqrt().clamp_min(1e-7)
    for step in range(steps):
        a, b, c = QUINTIC[step % len(QUINTIC)]
        gram = work @ work.mT
        dist.all_reduce(gram, group=group)
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)      # b G + c G G
        work = torch.addmm(work, update, work, beta=a)               # a X + update X
    return work.to(x.dtype)
