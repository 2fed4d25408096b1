"""What the attention tasks (ring attention PKB 54-57, Ulysses attention PKB 39) have in common, declared once.

The golden math (softmax attention and its backward in float64 on full sequences), the FLOPs a causal or
full attention needs, and the communication bound of a context-parallel ring. Each task's `spec.py` keeps
what is its own: its layout, projections, mesh and tolerance. The references do NOT import this module:
a reference is shown to the agent verbatim and must read on its own.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

import math

import torch

from pkb_env.contract import Comm, CostContext


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
              causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale) v for every batch and head of full-sequence (B, S, H, E) tensors, in float64.

    Returns (out (B, S, H, E), lse (B, H, S)): lse is each query's log-sum-exp of its visible scores, what
    FlashAttention's forward saves for its backward. `scale` None means 1/sqrt(E).
    """
    scores, scale = _scores(q, k, scale, causal)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse[..., None]) @ v.double().transpose(1, 2)
    return out.transpose(1, 2), lse


def attention_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, scale: float | None = None,
                       causal: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (each (B, S, H, E), float64) of softmax attention from the forward's out and lse (B, H, S),
    FlashAttention's way: P = exp(q k^T * scale - lse), dS = P * (dout v^T - rowsum(dout * out))."""
    scores, scale = _scores(q, k, scale, causal)
    qh, kh, vh, dh, oh = (t.double().transpose(1, 2) for t in (q, k, v, dout, out))
    probs = torch.exp(scores - lse.double()[..., None])
    dscores = probs * (dh @ vh.transpose(-1, -2) - (dh * oh).sum(-1, keepdim=True))
    dq = dscores @ kh * scale
    dk = dscores.transpose(-1, -2) @ qh * scale
    dv = probs.transpose(-1, -2) @ dh
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float | None, causal: bool) -> tuple[torch.Tensor, float]:
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q.double().transpose(1, 2) @ k.double().transpose(1, 2).transpose(-1, -2)) * scale
    if causal:
        seq = q.shape[1]
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), -math.inf)
    return scores, scale


def attention_flops(batch: int, heads: int, head_dim: int, seq: int, causal: bool) -> float:
    """FLOPs of q k^T and P v over a whole sequence: 2 multiply-adds per visible (query, key) pair and
    head element. A causal mask leaves S(S+1)/2 of the S^2 pairs; a balanced schedule splits them evenly."""
    pairs = seq * (seq + 1) // 2 if causal else seq * seq
    return 4 * batch * heads * head_dim * pairs


def ring_exchange(c: CostContext, block_bytes: int, group: str) -> Comm:
    """The least a context-parallel rank must move: the busiest rank must either receive the keys and
    values of the other group-1 blocks, or send its queries to them and receive as many partial outputs,
    so at least group-1 blocks of ONE (B, S/cp, H, E) tensor cross its link one way. That is an all-gather
    of one such block over the group, in one round."""
    return Comm("all_gather", c[group] * block_bytes, group)
