import torch
import torch.distributed as dist
import torch.nn.functional as F

CHUNK = 64  # tokens per chunk of the chunked (WY) form


def _all_to_all(x, group, scatter_dim, gather_dim):
    """Split x into W blocks along scatter_dim, send block j to rank j, and concatenate the blocks that
    arrive (in rank order) along gather_dim: sequence-split <-> head-split."""
    world = dist.get_world_size(group)
    send = torch.stack(x.chunk(world, dim=scatter_dim)).contiguous()
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    return torch.cat(received.unbind(0), dim=gather_dim)


def _gated_delta_rule(q, k, v, log_decay, beta):
    """Causal gated delta rule over the whole sequence, chunked, in float32.

    Per head, with state S (K, V): S_t = a_t (I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T and o_t = S_t^T q_t,
    a_t = exp(log_decay_t), b_t = beta_t. Within a chunk of L tokens the updates are solved together (the
    WY form): with G the running sum of log_decay from the chunk's start and D[t, i] = exp(G_t - G_i) for
    i <= t, the corrected values U solve (I + A) U = diag(b) V - diag(b exp(G)) K S_0, where
    A[t, i] = b_t D[t, i] k_t.k_i for i < t; then O = diag(exp(G)) Q S_0 + (Q K^T * D) U and the chunk
    hands on S_L = exp(G_L) S_0 + (K * exp(G_L - G))^T U.
    q, k (B, S, h, K); v (B, S, h, V); log_decay, beta (B, S, h). Returns (B, S, h, V) float32.
    """
    batch, seq, heads, key_dim = q.shape
    q, k, v = (x.float().transpose(1, 2) for x in (q, k, v))              # (B, h, S, D)
    log_decay, beta = (x.float().transpose(1, 2) for x in (log_decay, beta))  # (B, h, S)
    state = q.new_zeros(batch, heads, key_dim, v.shape[-1])
    outputs = []
    for start in range(0, seq, CHUNK):
        part = slice(start, start + CHUNK)
        qc, kc, vc, bc = q[:, :, part], k[:, :, part], v[:, :, part], beta[:, :, part]
        length = qc.shape[2]
        g = log_decay[:, :, part].cumsum(-1)
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp((g.unsqueeze(-1) - g.unsqueeze(-2)).masked_fill(~causal, float("-inf")))
        a = (bc.unsqueeze(-1) * (kc @ kc.mT) * decay).tril(-1)
        eye = torch.eye(length, device=q.device)
        solve = torch.linalg.solve_triangular(eye + a, torch.cat(
            [bc.unsqueeze(-1) * vc, (bc * g.exp()).unsqueeze(-1) * kc], dim=-1), upper=False, unitriangular=True)
        u = solve[..., :vc.shape[-1]] - solve[..., vc.shape[-1]:] @ state
        outputs.append((qc * g.exp().unsqueeze(-1)) @ state + ((qc @ kc.mT) * decay) @ u)
        state = g[..., -1:].exp().unsqueeze(-1) * state + (kc * (g[..., -1:] - g).exp().unsqueeze(-1)).mT @ u
    return torch.cat(outputs, dim=2).transpose(1, 2)


def solution(q, k, v, gate, beta, a_log, dt_bias, group):
    """Gated DeltaNet over a sequence split into W contiguous blocks, heads redistributed by all-to-all.

    q, k (B, S/W, H, K); v (B, S/W, H, V); gate, beta (B, S/W, H): this rank's block of the sequence.
    a_log, dt_bias (H,): per-head decay parameters, the same on every rank.
    An all-to-all turns the sequence split into a head split (each rank: H/W heads, the whole sequence);
    each rank runs the recurrence on its heads with q and k L2-normalised (q scaled by K^-1/2) and
    per-token log decay -exp(a_log) * softplus(gate + dt_bias); an all-to-all turns the result back.
    Returns (B, S/W, H, V) in q's dtype: this rank's block of the output.
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    heads = a_log.shape[0] // world
    mine = slice(rank * heads, (rank + 1) * heads)
    q, k, v, gate, beta = (_all_to_all(x, group, scatter_dim=2, gather_dim=1) for x in (q, k, v, gate, beta))

    q = F.normalize(q.float(), dim=-1, eps=1e-6) * q.shape[-1] ** -0.5
    k = F.normalize(k.float(), dim=-1, eps=1e-6)
    log_decay = -a_log[mine].float().exp() * F.softplus(gate.float() + dt_bias[mine].float())
    out = _gated_delta_rule(q, k, v, log_decay, beta)
    return _all_to_all(out.to(v.dtype), group, scatter_dim=1, gather_dim=2)
