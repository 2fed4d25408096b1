"""What the MoE dispatch tasks (PKB 26-29) share: the routing, its presets, and float64 goldens of Megatron's
all-to-all token dispatcher, written per pair so that each golden is a second, independent account of the
layouts the references build with masks and all-to-alls.

The layouts, for a group of G ranks and E experts placed contiguously (E / G per rank, expert e on rank
e // (E / G)):
- a rank's (token, expert) pairs in *expert-major* order: for e = 0..E-1, the tokens that picked e in
  ascending order (Megatron's `permute` of a routing map; `mapping` below);
- sent to each rank in that order, so rank d receives, from each source s in turn, s's pairs for d's
  experts, expert by expert: rows grouped [source][local expert];
- regrouped by local expert, then source ([local expert][source]), so that each local expert's rows are
  contiguous for its GEMM: what the pre-dispatch all-to-all returns and the post-combine one takes back.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

import torch

from pkb_env.contract import Preset, Routing

EXPERTS, TOP_K = 8, 2
"""PKB's MoE problems: 8 experts, top-2 (Mixtral's)."""

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")

ROUTING = Routing("route", tokens="T", experts="E", k="K", group="world", skew=1.0,
                  doc="per-expert popularity drawn per call: hot experts, uneven splits that change every call")

MAX_RECEIVED = "W * T * min(K, E / W)"
"""The most pairs a rank can receive: every token of every rank of the group picking as many of its experts
as a token can (its K picks are distinct experts)."""


def presets(tiny_note: str = "CPU ranks, milliseconds") -> dict[str, Preset]:
    """`tiny` (16 tokens a rank, 8-wide rows, fp32) and `bench` (PKB's 1024 tokens of 1024, bf16). E and K
    are dims so that shapes and bounds may name them; they are PKB's 8 and 2 in every preset."""
    return {"tiny": Preset({"T": 16, "N": 8, "E": EXPERTS, "K": TOP_K}, "float32", tiny_note),
            "bench": Preset({"T": 1024, "N": 1024, "E": EXPERTS, "K": TOP_K}, "bfloat16",
                            "PKB's size: 1024 tokens of hidden size 1024 a rank, 8 experts, top-2")}


def picks(mask: torch.Tensor) -> torch.Tensor:
    """(T, E) bool: token t picked expert e, from a one-hot mask (E, K, T)."""
    return mask.sum(dim=1).T.bool()


def picks_of(topk_idx: torch.Tensor, experts: int) -> torch.Tensor:
    """(T, E) bool: token t picked expert e, from the picks (T, K)."""
    return torch.zeros((topk_idx.shape[0], experts), dtype=torch.bool).scatter(1, topk_idx.cpu(), True)


def mapping(chosen: torch.Tensor) -> torch.Tensor:
    """(T * K,) int64: the token of each of a rank's pairs in expert-major order, token ascending, from its
    picks (T, E) bool."""
    return torch.cat([chosen[:, e].nonzero().flatten() for e in range(chosen.shape[1])])


def received(chosen: list[torch.Tensor], rank: int, world: int) -> list[tuple[int, int, int]]:
    """The pairs `rank` receives, as (source rank, token, expert), in the pre-dispatch output's order: by local
    expert, then source rank, then token ascending; `chosen`: every rank's picks (T, E) bool."""
    experts = chosen[0].shape[1]
    local = experts // world
    rows = []
    for expert in range(rank * local, (rank + 1) * local):
        for source, mine in enumerate(chosen):
            rows += [(source, int(t), expert) for t in mine[:, expert].nonzero().flatten()]
    return rows


def own_mask(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype, env) -> torch.Tensor:
    """A rank's picks as a one-hot mask (E, K, T), drawn from the rank's own stream as `ROUTING` draws a
    member's: standard-normal gate logits plus a per-expert popularity bias of std 1 (this rank's own), top-K
    per token. For a task whose inputs are only the routing (PKB 26): a routing drawn jointly comes from a seed
    every member holds, which would reveal every peer's counts without the exchange that is the task."""
    experts, k, tokens = shape
    bias = torch.randn((experts,), generator=gen, device=gen.device)
    logits = torch.randn((tokens, experts), generator=gen, device=gen.device) + bias
    picked = logits.topk(k, dim=-1).indices
    return torch.nn.functional.one_hot(picked, experts).permute(2, 1, 0).contiguous().to(dtype)
