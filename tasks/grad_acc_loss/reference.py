import torch
import torch.distributed as dist


def solution(loss: torch.Tensor, local_valid_tokens: torch.Tensor, global_valid_tokens: torch.Tensor,
             grad_normalized_loss: torch.Tensor, grad_loss_sum: torch.Tensor,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A token-weighted loss under gradient accumulation over data-parallel ranks (VeOmni's and Hugging
    Face's gradient-accumulation loss fix). On each rank, loss is the mean loss (0-dim) over this rank's
    local_valid_tokens (int64, 0-dim) valid tokens of this micro-batch: not finite where the rank has none; such a
    rank contributes 0. global_valid_tokens (int64, 0-dim, the same on every rank) counts the valid tokens of
    every rank over every micro-batch of the step. In fp32: loss_sum = sum over ranks of loss * local_valid_tokens,
    normalized_loss = loss_sum / global_valid_tokens (both the same on every rank), and the gradient of the
    rank's loss from upstream gradients grad_normalized_loss and grad_loss_sum (0-dim each):
    grad_loss = grad_normalized_loss * local_valid_tokens / global_valid_tokens + grad_loss_sum *
    local_valid_tokens. Returns (normalized_loss, loss_sum, grad_loss), three 0-dim fp32 tensors."""
    local = local_valid_tokens.float()
    weighted = torch.where(local_valid_tokens > 0, loss.float(), 0.0) * local
    dist.all_reduce(weighted, op=dist.ReduceOp.SUM)
    normalized_loss = weighted / global_valid_tokens
    grad_loss = grad_normalized_loss.float() * local / global_valid_tokens + grad_loss_sum.float() * local
    return normalized_loss, weighted, grad_loss
