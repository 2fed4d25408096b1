import torch
import torch.distributed as dist
import torch.nn.functional as F


def _gather(shard: torch.Tensor, group, dim: int) -> torch.Tensor:
    """The blocks of the ranks of `group`, in group order, concatenated along `dim` (0 or 1)."""
    n = dist.get_world_size(group)
    out = shard.new_empty((n * shard.shape[0], shard.shape[1]))
    dist.all_gather_into_tensor(out, shard.contiguous(), group=group)
    if dim == 0:
        return out
    return out.view(n, *shard.shape).permute(1, 0, 2).reshape(shard.shape[0], n * shard.shape[1])


@torch.no_grad()
def solution(x: torch.Tensor, W1_shard: torch.Tensor, W2_shard: torch.Tensor, W3_shard: torch.Tensor,
             tp_group: dist.ProcessGroup, fsdp_group: dist.ProcessGroup) -> torch.Tensor:
    """A gated MLP y = (silu(x W1) * (x W2)) W3 under FSDP x tensor parallelism. The ranks form a mesh
    (fsdp, tp), tp varying fastest; tp_group holds the ranks of this rank's fsdp coordinate (its tensor-
    parallel peers), fsdp_group those of its tp coordinate. W1, W2 (D, F) and W3 (F, D) are split by tensor
    parallelism into column blocks (W1, W2) and row blocks (W3) of F/tp, and each tp block is split again by
    FSDP: rank (f, t) holds rows block f of W1's and W2's column block t, (D/fsdp, F/tp), and column block f
    of W3's row block t, (F/tp, D/fsdp). x (N/fsdp, D) is this fsdp rank's rows of the batch, the same on
    every rank of its tp group. Each rank gathers its tp block of the weights over fsdp_group, computes its
    partial output over its F/tp hidden units and the partials are summed over tp_group: every rank returns
    y for its fsdp rows, (N/fsdp, D)."""
    W1 = _gather(W1_shard, fsdp_group, 0)
    W2 = _gather(W2_shard, fsdp_group, 0)
    W3 = _gather(W3_shard, fsdp_group, 1)
    y = (F.silu(x @ W1) * (x @ W2)) @ W3
    dist.all_reduce(y, group=tp_group)
    return y
