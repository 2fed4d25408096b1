import torch
import torch.distributed as dist


def _filter_top_k_top_p(logits, top_k, top_p):
    """float32 logits with -inf outside the sampling filter, and the filter's keep mask: the top_k largest
    of each row (ties at the k-th value kept), then the nucleus: a survivor stays when the survivors'
    probability at or below it exceeds 1 - top_p (the mass strictly above it is below top_p), ties
    deciding together."""
    logits = logits.float()
    keep = torch.ones_like(logits, dtype=torch.bool)
    if top_k is not None and top_k > 0:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        keep = logits >= kth
        logits = logits.masked_fill(~keep, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ascending, order = logits.sort(dim=-1)
        mass = ascending.softmax(dim=-1).cumsum(dim=-1)
        last_tie = torch.searchsorted(ascending, ascending, right=True) - 1
        nucleus = mass.gather(-1, last_tie) > 1 - top_p
        keep = keep & torch.empty_like(nucleus).scatter_(-1, order, nucleus)
        logits = logits.masked_fill(~keep, float("-inf"))
    return logits, keep


def solution(vocab_parallel_logits, target, grad_output, tp_group, top_k, top_p, chunk_size):
    """Gradient, with respect to the vocabulary-parallel logits, of the target tokens' log-probabilities
    under the top-k / top-p filtered softmax, a chunk of tokens at a time (the backward of NeMo-RL's
    filtered GRPO log-probs).

    vocab_parallel_logits (B, S, V/W): this rank's block of the vocabulary, ids [rank*V/W, (rank+1)*V/W).
    target (B, S): token ids in [0, V); grad_output (B, S): d loss / d log-prob; both the same everywhere.
    For a token with filtered probabilities p: d/dlogits = grad_output * (onehot(target) - p) on the logits
    the filter keeps, 0 on the others. Per chunk of B*chunk_size flattened tokens: an all-to-all turns the vocabulary
    split into a token split, each rank computes its tokens' full-vocabulary gradient rows in float32, and
    an all-to-all sends every rank its vocabulary block back.
    Returns (B, S, V/W) float32: this rank's block of the gradient.
    """
    world, rank = dist.get_world_size(tp_group), dist.get_rank(tp_group)
    batch, seq, local_vocab = vocab_parallel_logits.shape
    tokens = batch * seq
    logits = vocab_parallel_logits.reshape(tokens, local_vocab)
    targets, grads = target.reshape(tokens), grad_output.reshape(tokens).float()

    pieces = []
    for start in range(0, tokens, batch * chunk_size):
        end = min(start + batch * chunk_size, tokens)
        mine = (end - start) // world
        send = logits[start:end].contiguous()
        received = torch.empty_like(send)
        dist.all_to_all_single(received, send, group=tp_group)
        rows = received.view(world, mine, local_vocab).permute(1, 0, 2).reshape(mine, world * local_vocab)

        filtered, keep = _filter_top_k_top_p(rows, top_k, top_p)
        mine_at = slice(start + rank * mine, start + (rank + 1) * mine)
        grad = -filtered.softmax(dim=-1)
        grad[torch.arange(mine, device=grad.device), targets[mine_at]] += 1.0
        grad = grad * grads[mine_at].unsqueeze(-1) * keep

        back = grad.view(mine, world, local_vocab).permute(1, 0, 2).contiguous()
        returned = torch.empty_like(back)
        dist.all_to_all_single(returned, back, group=tp_group)
        pieces.append(returned.reshape(world * mine, local_vocab))
    return torch.cat(pieces).view(batch, seq, local_vocab)
