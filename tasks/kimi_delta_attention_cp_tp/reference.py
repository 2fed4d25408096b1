import torch
import torch.distributed as dist
import torch.nn.functional as F

CHUNK = 64          # tokens per chunk of the chunked (WY) form
LOWER_BOUND = -5.0  # KDA's gate: log decay per token and key channel = LOWER_BOUND * sigmoid(...)


def _chunk_terms(q, k, v, log_decay, beta):
    """Per chunk of this rank's block, the parts of the chunked (WY) form that do not depend on the state.

    Per head, S_t = (I - b_t k_t k_t^T) diag(a_t) S_{t-1} + b_t k_t v_t^T and o_t = S_t^T q_t, with a_t the
    per-channel decay. In a chunk, with G the running sum of log a from its start and
    D[t, i, :] = exp(G_t - G_i) for i <= t: A[t, i] = b_t k_t.(D[t, i] k_i) for i < t; the corrected values
    are U = U0 - W S_0 with (I + A) [U0, W] = [diag(b) V, diag(b) (K * exp(G))]; then
    O = (Q * exp(G)) S_0 + P U with P[t, i] = q_t.(D[t, i] k_i), i <= t, and the chunk hands on
    S_L = diag(exp(G_L)) S_0 + (K * exp(G_L - G))^T U.
    q, k, log_decay (B, h, T, K); v (B, h, T, V); beta (B, h, T).
    """
    terms = []
    for start in range(0, q.shape[2], CHUNK):
        part = slice(start, start + CHUNK)
        qc, kc, vc, bc = q[:, :, part], k[:, :, part], v[:, :, part], beta[:, :, part]
        g = log_decay[:, :, part].cumsum(2)
        length = qc.shape[2]
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp((g.unsqueeze(3) - g.unsqueeze(2)).masked_fill(~causal[..., None], float("-inf")))
        keys = kc.unsqueeze(2) * decay                                     # (B, h, t, i, K): D[t, i] k_i
        a = (bc.unsqueeze(-1) * (kc.unsqueeze(3) * keys).sum(-1)).tril(-1)
        solved = torch.linalg.solve_triangular(
            torch.eye(length, device=q.device) + a,
            torch.cat([bc.unsqueeze(-1) * vc, bc.unsqueeze(-1) * kc * g.exp()], dim=-1),
            upper=False, unitriangular=True)
        terms.append({"u0": solved[..., :vc.shape[-1]], "w": solved[..., vc.shape[-1]:],
                      "q": qc * g.exp(), "p": (qc.unsqueeze(3) * keys).sum(-1),
                      "k_end": kc * (g[:, :, -1:] - g).exp(), "decay_end": g[:, :, -1].exp()})
    return terms


def _sweep(terms, state, outputs):
    """Run the chunks from `state` (B, h, K, V); returns (outputs (B, h, T, V) or None, the final state)."""
    out = []
    for t in terms:
        u = t["u0"] - t["w"] @ state
        if outputs:
            out.append(t["q"] @ state + t["p"] @ u)
        state = t["decay_end"].unsqueeze(-1) * state + t["k_end"].mT @ u
    return (torch.cat(out, dim=2) if outputs else None), state


def _transition(terms):
    """M (B, h, K, K) with final state = M @ initial state + (final state from zero), over the block."""
    m = None
    for t in terms:
        step = torch.diag_embed(t["decay_end"]) - t["k_end"].mT @ t["w"]
        m = step if m is None else step @ m
    return m


def solution(q, k, v, g, beta, a_log, dt_bias, cp_group, tp_group):
    """Kimi Delta Attention over a sequence split into cp blocks, heads split over tp.

    q, k, g (B, S/cp, H, K); v (B, S/cp, H, V); beta (B, S/cp, H): this cp rank's block of the sequence,
    every head (the same on its tp peers). a_log (H,), dt_bias (H*K,): the gate's parameters.
    Each rank takes H/tp heads: q, k L2-normalised (q scaled by K^-1/2), beta -> sigmoid(beta), log decay
    LOWER_BOUND * sigmoid(exp(a_log) * (g + dt_bias)) per key channel. Context parallel as fla's KCP: every
    rank runs its block from a zero state and forms the block's transition M; one all-gather over cp of
    (final state, M) lets rank c fold blocks 0..c-1 into the state entering its own, from which it computes
    its outputs. The tp ranks then all-gather their heads.
    Returns (B, S/cp, H, V) in q's dtype, the same on the tp peers.
    """
    tp, tp_rank = dist.get_world_size(tp_group), dist.get_rank(tp_group)
    heads = q.shape[2] // tp
    mine = slice(tp_rank * heads, (tp_rank + 1) * heads)
    out = context_parallel(q, k, v, g, beta, a_log, dt_bias, cp_group, mine)
    out = out.to(q.dtype).contiguous()                                      # (B, S/cp, h, V)
    heads_of = out.new_empty((tp * out.shape[0],) + out.shape[1:])
    dist.all_gather_into_tensor(heads_of, out, group=tp_group)
    return torch.cat(heads_of.view((tp,) + out.shape).unbind(0), dim=2)


def context_parallel(q, k, v, g, beta, a_log, dt_bias, cp_group, mine):
    """KDA of the heads `mine` (a slice) over the sequence whose cp blocks the ranks of cp_group hold (this rank's
    block in q, k, v, g, beta): float32 (B, S/cp, h, V), this block's outputs (KCP state passing, above)."""
    cp, cp_rank = dist.get_world_size(cp_group), dist.get_rank(cp_group)
    batch, seq, total_heads, key_dim = q.shape
    heads = len(range(total_heads)[mine])

    scale = a_log[mine].float().exp().view(1, 1, heads, 1)
    bias = dt_bias.float().view(total_heads, key_dim)[mine]
    log_decay = LOWER_BOUND * torch.sigmoid(scale * (g[:, :, mine].float() + bias))
    qh = F.normalize(q[:, :, mine].float(), dim=-1) * key_dim ** -0.5
    kh = F.normalize(k[:, :, mine].float(), dim=-1)
    terms = _chunk_terms(qh.transpose(1, 2), kh.transpose(1, 2), v[:, :, mine].float().transpose(1, 2),
                         log_decay.transpose(1, 2), beta[:, :, mine].float().sigmoid().transpose(1, 2))

    zero = qh.new_zeros(batch, heads, key_dim, v.shape[-1])
    _, from_zero = _sweep(terms, zero, outputs=False)
    mine_pair = torch.cat([from_zero, _transition(terms)], dim=-1)          # (B, h, K, V + K)
    pairs = mine_pair.new_empty((cp * batch,) + mine_pair.shape[1:])
    dist.all_gather_into_tensor(pairs, mine_pair, group=cp_group)
    state = zero
    for block in pairs.view((cp,) + mine_pair.shape)[:cp_rank]:
        state = block[..., v.shape[-1]:] @ state + block[..., :v.shape[-1]]
    out, _ = _sweep(terms, state, outputs=True)
    return out.transpose(1, 2)
