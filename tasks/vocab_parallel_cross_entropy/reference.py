import torch
import torch.distributed as dist


def solution(vocab_parallel_logits, target, group):
    """Cross-entropy loss per token of logits split over the vocabulary (Megatron-LM's vocab-parallel loss).

    vocab_parallel_logits (B, S, V/W): this rank's block of the vocabulary, ids [rank*V/W, (rank+1)*V/W).
    target (B, S): the target token id of every position, in [0, V); the same on every rank.
    Returns (B, S) float32, the same on every rank: logsumexp over the whole vocabulary of the logits
    minus the target's logit. Computed in float32 (Megatron upcasts the logits): the global maximum, then
    the target's shifted logit from the rank that holds it, then the sum of exponentials, each reduced
    over the group.
    """
    rank = dist.get_rank(group)
    logits = vocab_parallel_logits.float()
    local_vocab = logits.shape[-1]

    logits_max = logits.amax(dim=-1)
    dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
    shifted = logits - logits_max.unsqueeze(-1)

    start = rank * local_vocab
    elsewhere = (target < start) | (target >= start + local_vocab)
    local_target = (target - start).masked_fill(elsewhere, 0)
    predicted = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(elsewhere, 0.0)
    dist.all_reduce(predicted, op=dist.ReduceOp.SUM, group=group)

    sum_exp = shifted.exp().sum(dim=-1)
    dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)
    return torch.log(sum_exp) - predicted
