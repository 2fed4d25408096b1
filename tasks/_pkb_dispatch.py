"""PKB's inputs for its two MoE dispatch problems, 28 (moe_pre_all2all) and 29 (moe_post_all2all), for the `pkb`
variants of those tasks (tasks/<name>/pkb/; docs/pkb_compat.md, "PKB's problem as PKB states it").

pkb-env's tasks pass the real counts of a routing drawn jointly over the ranks (tasks/_moe_dispatch.py): uneven,
different every call, so ranks hold and receive different numbers of rows. PKB's harness draws, on every rank and
apart from every other rank:
- each token's K = 2 distinct experts of E = 8, uniformly (28: the one-hot expert_mask (E, K, T) float32, slot k the
  k-th pick; 29: routing_map (E, T) bool, with selected_experts its experts in ascending order);
- counts that do not follow the routing: the K T permuted rows cut evenly, input_splits = output_splits = K T / W
  for every peer, and num_global_tokens_per_local_expert (W, E / W) K T / E in every slot (the first K T mod E
  slots one more). Every rank so holds K T rows and receives K T rows, whatever the routing says.
Given those counts, PKB's functions are the tasks': rows go where the splits send them and are regrouped by the
per-expert counts, so a row may reach a rank that does not hold its expert. The goldens here follow the counts, not
the experts.
"""
from __future__ import annotations

import torch

from pkb_env.contract import Comm, FromInputs, Tensor, WorldSizes
from pkb_env.tasks._pkb import PKB_VARIANT

EVEN = WorldSizes(splits=("K * T",), reason="PKB cuts the K T permuted rows into W equal input_splits")
"""W must divide K T: PKB's harness gives the last peer the remainder of its own input_splits and of its
output_splits alike, which the peers' splits do not match, so no exchange exists there."""


def distinct_picks(gen: torch.Generator, tokens: int, experts: int, k: int) -> torch.Tensor:
    """(T, K) int64: each token's k distinct experts, drawn uniformly in order (PKB: randperm(E)[:k] per token)."""
    keys = torch.rand((tokens, experts), generator=gen, device=gen.device)
    return keys.argsort(dim=-1)[:, :k]


def one_hot_mask(gen, shape, dtype, env) -> torch.Tensor:
    """PKB 28's expert_mask (E, K, T): [e, k, t] = 1 where token t's k-th pick is expert e."""
    experts, k, tokens = shape
    picked = distinct_picks(gen, tokens, experts, k)
    return torch.nn.functional.one_hot(picked, experts).permute(2, 1, 0).contiguous().to(dtype)


def routing_map(gen, shape, dtype, env) -> torch.Tensor:
    """PKB 29's routing_map (E, T): [e, t] where token t picked expert e."""
    experts, tokens = shape
    picked = distinct_picks(gen, tokens, experts, int(env["K"]))
    return torch.zeros((tokens, experts), dtype=dtype, device=gen.device).scatter(1, picked, True).T.contiguous()


def _splits(values, shape, dtype, env) -> torch.Tensor:
    (read,) = values.values()
    return torch.full(shape, int(read.sum()) // shape[0], dtype=dtype, device=read.device)


def _per_expert(values, shape, dtype, env) -> torch.Tensor:
    (read,) = values.values()
    total, slots = int(read.sum()), shape[0] * shape[1]
    flat = torch.full((slots,), total // slots, dtype=dtype, device=read.device)
    flat[:total % slots] += 1
    return flat.view(shape)


def counts(read: str) -> tuple[Tensor, Tensor, Tensor]:
    """PKB's input_splits, output_splits and num_global_tokens_per_local_expert, from the total of the routing
    input `read` (K T pairs), as PKB's harness makes them (the module docstring)."""
    def count(name, shape, fn, text, doc):
        return Tensor(name, shape, "int64", FromInputs(fn, (read,), text), doc=doc)

    return (count("input_splits", ("W",), _splits, "K T / W for every rank (PKB's equal splits)",
                  "the rows this rank sends each rank, in rank order (on the device)"),
            count("output_splits", ("W",), _splits, "K T / W for every rank, equal to input_splits",
                  "the rows each rank sends here, in rank order (on the device)"),
            count("num_global_tokens_per_local_expert", ("W", "E / W"), _per_expert,
                  "K T / E in every slot, the first K T mod E one more (PKB's counts)",
                  "[s, l]: the rows from rank s counted for this rank's l-th expert (on the device)"))


def exchange(blocks: list[torch.Tensor], splits: list[torch.Tensor]) -> list[torch.Tensor]:
    """What an all-to-all-v delivers: rank s cuts `blocks[s]` by `splits[s]` and sends its r-th piece to rank r;
    rank r receives the pieces in source order."""
    pieces = [block.split(split.tolist()) for block, split in zip(blocks, splits)]
    return [torch.cat([mine[r] for mine in pieces]) for r in range(len(blocks))]


def offrank(c) -> Comm:
    """The all-to-all-v of PKB's counts: every rank sends K T rows of N, all but 1/W of them to other ranks."""
    return Comm("all_to_allv", c["K"] * c["T"] * (c["W"] - 1) // c["W"] * c["N"] * c.elem)


COUNTS = ("The counts are PKB's, not the routing's: input_splits = output_splits = K T / W for every rank, and "
          "num_global_tokens_per_local_expert (W, E / W) K T / E in every slot (the first K T mod E one more).")
"""PKB's counts in the variants' descriptions."""

DEPARTURES = (PKB_VARIANT,
              "PKB's counts: K T / W rows to and from every rank and K T / E per local expert and source, whatever "
              "the routing (each token's 2 distinct experts of 8, drawn uniformly, per rank); the task's are the "
              "real counts of a routing drawn over the ranks, uneven and different every call",
              "the counts arrive as int64 tensors on the device (PKB passes the splits as Python lists: PKB's call "
              "gets lists) and the process group is an input the judge builds")
