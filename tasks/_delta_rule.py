"""What the two delta-rule tasks (PKB 74 Kimi Delta Attention, PKB 75 Gated DeltaNet) share, declared once.

Both are flash-linear-attention's gated delta rule: a (K, V) state per head, decayed by a gate (per key
channel for KDA, per head for Gated DeltaNet) and corrected towards each token's value. They share the
golden (the token-by-token recurrence in float64), the gate parameters' distributions (fla's
initialisation, so that states outlive a rank's block) and the shape of their tolerance.

A plain module, not a task package (`pkb_env.task.task_names()` skips names starting with an underscore).
"""
from __future__ import annotations

import math

import torch

from pkb_env.contract import Rounded, Rule, Sum, Uniform

A_LOG = Uniform(0.0, math.log(16.0))
"""log A with A in [1, 16): fla's initialisation of the decay rate."""
DT_BIAS = Uniform(-6.9, -2.25)
"""softplus^-1 of dt in [1e-3, 1e-1): fla's (Mamba's) dt_bias, so a token decays the state by ~1% or less."""


def recurrence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor,
               beta: torch.Tensor) -> torch.Tensor:
    """The gated delta rule token by token: S_t = diag(exp(log_decay_t)) S_{t-1};
    S_t += beta_t k_t (v_t - S_t^T k_t)^T; o_t = S_t^T q_t, per batch and head, from S = 0.
    q, k (B, S, H, K); v (B, S, H, V); log_decay (B, S, H, K) per key channel; beta (B, S, H)."""
    batch, seq, heads, key_dim = q.shape
    state = q.new_zeros(batch, heads, key_dim, v.shape[-1])
    out = []
    for t in range(seq):
        state = log_decay[:, t].exp().unsqueeze(-1) * state
        error = v[:, t] - (k[:, t].unsqueeze(-2) @ state).squeeze(-2)
        state = state + k[:, t].unsqueeze(-1) * (beta[:, t].unsqueeze(-1) * error).unsqueeze(-2)
        out.append((q[:, t].unsqueeze(-2) @ state).squeeze(-2))
    return torch.stack(out, dim=1)


def tolerance(output_rms: str) -> Rule:
    """A chunked kernel (fla's) stores its intermediates in the dtype: corrected values, WY factors, chunk
    states and masked scores, each rounding to ~u of the output's RMS; in float32 the arithmetic shows
    instead, each output summing K state entries of size ~1 times q's (norm K^-1/2)."""
    return (Rounded(8, output_rms, what=f"the intermediates a chunked kernel stores in the dtype (corrected "
                                        f"values, WY factors, chunk states, masked scores), on outputs of RMS "
                                        f"~{output_rms}")
            + Sum("K", "1 / sqrt(K)", "float32", what="S^T q: K state entries (~1) times q (norm K^-1/2), in fp32"))
