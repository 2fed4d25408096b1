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

from pkb_env.contract import Comm, CostContext, Rounded, Rule, Sum

PREDICTABLE_SEEDS = ("inputs come from secret per-trial seeds; PKB seeds each rank from its rank and the trial "
                     "number, so a candidate can rebuild any peer's block without communicating")
"""The departure every context- and sequence-parallel task shares (PKB 33-39, 54-57)."""


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
              causal: bool = False, precision: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale) v for every batch and head of full-sequence (B, S, H, E) tensors, computed in
    `precision` (float64 for goldens).

    Returns (out (B, S, H, E), lse (B, H, S)): lse is each query's log-sum-exp of its visible scores, what
    FlashAttention's forward saves for its backward. `scale` None means 1/sqrt(E).
    """
    scores, scale = _scores(q, k, scale, causal, precision)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse[..., None]) @ v.to(precision).transpose(1, 2)
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


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float | None, causal: bool,
            precision: torch.dtype = torch.float64) -> tuple[torch.Tensor, float]:
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q.to(precision).transpose(1, 2) @ k.to(precision).transpose(1, 2).transpose(-1, -2)) * scale
    if causal:
        seq = q.shape[1]
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    return scores, scale


def attention_flops(batch: int, heads: int, head_dim: int, seq: int, causal: bool) -> float:
    """FLOPs of q k^T and P v over a whole sequence: 2 multiply-adds per visible (query, key) pair and
    head element. A causal mask leaves S(S+1)/2 of the S^2 pairs; a balanced schedule splits them evenly."""
    pairs = seq * (seq + 1) // 2 if causal else seq * seq
    return 4 * batch * heads * head_dim * pairs


def context_exchange(c: CostContext, block_bytes: int, group: str, heads: int, ring: int = 1,
                     split: int = 4) -> Comm:
    """The least a rank must move to attend over a sequence split into c[group] blocks, as one collective:
    the cheaper in bytes of two schedules, each in one round (its bytes and one latency are a lower bound
    on either's time).

    * A ring (or any exchange of whole blocks): the busiest rank needs every other block, so at least
      group-1 blocks of `ring` (B, S/cp, H, E) tensors cross its link one way. Forward, `ring` is 1: a rank
      can receive keys and values, or send queries and receive as many partial outputs. An all-gather.
    * A head split (Ulysses), when the group divides the heads: each rank attends over every position for
      heads/group heads, receiving `split` tensors' worth of (group-1)/group blocks and sending as much
      back (forward: q, k, v in, the outputs back: 4). An all-to-all.

    The head split moves fewer bytes when split < ring * group (forward: from 5 ranks on)."""
    n = c[group]
    ring_blocks = f"a ring of whole blocks (all_gather: {n - 1} x {ring} block(s) into each rank)"
    head_split = f"Ulysses' head split (all_to_all: {split} tensors, (W-1)/W of a block each, each way)"
    wins = f"the head split moves fewer bytes from {split // ring + 1} ranks on, where they divide the heads"
    if heads % n == 0 and split < ring * n:
        why = f"the cheaper schedule here: {head_split} rather than {ring_blocks}; {wins}"
        return Comm("all_to_all", split * block_bytes, group, why=why)
    if heads % n:
        why = f"{ring_blocks}: the head split needs the {heads} heads divisible by the {n} ranks"
    else:
        why = f"the cheaper schedule here: {ring_blocks} rather than {head_split}; {wins}"
    return Comm("all_gather", n * ring * block_bytes, group, why=why)


def layer_tolerance(weight_std: float, roundings: str, what: str) -> Rule:
    """Where rounding enters an attention layer y = attention(h w_qkv^T) w_o^T with unit hidden states and
    weights of std `weight_std`; the output's RMS is at most weight_std^2 * sqrt(H*E*D) (a query that sees
    one key). The QKV projection's fp32 sums, carried to the output by w_o (a gain of
    weight_std * sqrt(H*E)); `roundings` values of the output's size stored in the dtype, `what` says which
    (q, k, v, scores, probabilities, the attention output, ring merges, ...); the output projection's fp32
    sums."""
    out_rms = f"{weight_std ** 2} * sqrt(H * E * D)"
    return (Sum("D", f"{weight_std ** 2} * sqrt(H * E)", "float32", what="QKV projection, through w_o")
            + Rounded(roundings, out_rms, what=what)
            + Sum("H * E", f"{out_rms} / sqrt(H * E)", "float32", what="output projection"))
