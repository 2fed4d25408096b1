import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(hidden_states: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, old_logprobs: torch.Tensor,
             advantages: torch.Tensor, ignore_index: int):
    """A GRPO-style importance-sampling policy-gradient loss over data-parallel ranks (NeMo-RL, verl). Every
    rank holds M tokens: hidden_states (M, N), labels (M,) int64 (ignore_index marks tokens without a label),
    the old policy's log-probabilities old_logprobs (M,) fp32 and advantages (M,) fp32; weight (V, N), the
    output projection, is the same on every rank. Per token, with logits = hidden_states @ weight.T (in the
    task dtype, then fp32): logprob = log_softmax(logits)[label], delta = clamp(logprob - old_logprob, -20, 20),
    ratio = exp(delta), pg = -ratio * advantage (0 on ignored tokens). With n = the number of valid tokens over
    every rank (at least 1), every rank returns (loss, None, logprobs, pg, metrics): loss = the sum of pg over
    every rank's valid tokens / n (0-dim); logprobs (M,) (0 on ignored tokens) and pg (M,), this rank's; metrics
    a dict of 0-dim tensors over every rank's valid tokens: ratio_mean (sum of ratio / n), ratio_min,
    ratio_max (inf and -inf where no rank has a valid token), k3_mean (sum of ratio - delta - 1, / n) and
    entropy_mean (sum of -logprob / n). Everything fp32."""
    logits = F.linear(hidden_states, weight).float()
    valid = labels != ignore_index
    safe = torch.where(valid, labels, 0)
    logprobs = logits.log_softmax(dim=-1).gather(1, safe.unsqueeze(1)).squeeze(1).masked_fill(~valid, 0.0)
    delta = (logprobs - old_logprobs).masked_fill(~valid, 0.0).clamp(-20.0, 20.0)
    ratio = torch.exp(delta)
    pg = (-ratio * advantages).masked_fill(~valid, 0.0)

    n = valid.sum().float()
    dist.all_reduce(n, op=dist.ReduceOp.SUM)
    n = n.clamp(min=1.0)
    pg_sum = pg.sum()
    dist.all_reduce(pg_sum, op=dist.ReduceOp.SUM)
    ratio_sum = ratio.masked_fill(~valid, 0.0).sum()
    dist.all_reduce(ratio_sum, op=dist.ReduceOp.SUM)
    ratio_min = ratio.masked_fill(~valid, float("inf")).min()
    dist.all_reduce(ratio_min, op=dist.ReduceOp.MIN)
    ratio_max = ratio.masked_fill(~valid, float("-inf")).max()
    dist.all_reduce(ratio_max, op=dist.ReduceOp.MAX)
    k3_sum = (ratio - delta - 1.0).masked_fill(~valid, 0.0).sum()
    dist.all_reduce(k3_sum, op=dist.ReduceOp.SUM)
    entropy_sum = -logprobs.sum()
    dist.all_reduce(entropy_sum, op=dist.ReduceOp.SUM)

    metrics = {"ratio_mean": ratio_sum / n, "ratio_min": ratio_min, "ratio_max": ratio_max,
               "k3_mean": k3_sum / n, "entropy_mean": entropy_sum / n}
    return pg_sum / n, None, logprobs, pg, metrics
