import torch
import torch.distributed as dist
import torch.nn.functional as F


def _filter_top_k_top_p(logits, top_k, top_p):
    """float32 logits with -inf outside the sampling filter: the top_k largest of each row (ties at the k-th
    value kept), then the nucleus: a survivor stays when the survivors' probability at or below it exceeds
    1 - top_p (the mass strictly above it is below top_p), ties deciding together."""
    logits = logits.float()
    if top_k is not None and top_k > 0:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ascending, order = logits.sort(dim=-1)
        mass = ascending.softmax(dim=-1).cumsum(dim=-1)
        last_tie = torch.searchsorted(ascending, ascending, right=True) - 1
        keep = mass.gather(-1, last_tie) > 1 - top_p
        keep = torch.empty_like(keep).scatter_(-1, order, keep)
        logits = logits.masked_fill(~keep, float("-inf"))
    return logits


def solution(vocab_parallel_logits, target, tp_group, top_k, top_p):
    """Log-probability of each target token under the top-k / top-p filtered softmax, from logits split
    over the vocabulary (NeMo-RL's GRPO log-probs with the sampler's filter).

    vocab_parallel_logits (B, S, V/W): this rank's block of the vocabulary, ids [rank*V/W, (rank+1)*V/W).
    target (B, S): token ids in [0, V), the same on every rank.
    An all-to-all turns the vocabulary split into a token split (rank r gets tokens [r*B*S/W, (r+1)*B*S/W)
    of the flattened B*S, with the whole vocabulary), each rank filters and log-softmaxes its rows in
    float32 and picks the targets, and an all-gather assembles every token's log-probability.
    Returns (B, S) float32, the same on every rank (-inf for a target the filter removes).
    """
    world, rank = dist.get_world_size(tp_group), dist.get_rank(tp_group)
    batch, seq, local_vocab = vocab_parallel_logits.shape
    tokens = batch * seq
    mine = tokens // world

    send = vocab_parallel_logits.reshape(tokens, local_vocab).contiguous()
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=tp_group)
    rows = received.view(world, mine, local_vocab).permute(1, 0, 2).reshape(mine, world * local_vocab)

    log_probs = F.log_softmax(_filter_top_k_top_p(rows, top_k, top_p), dim=-1)
    my_targets = target.reshape(tokens)[rank * mine:(rank + 1) * mine]
    picked = log_probs.gather(-1, my_targets.unsqueeze(-1)).squeeze(-1)

    gathered = torch.empty(tokens, dtype=picked.dtype, device=picked.device)
    dist.all_gather_into_tensor(gathered, picked, group=tp_group)
    return gathered.view(batch, seq)
