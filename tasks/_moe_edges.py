"""The MoE tasks' edge cases and the rules they reach: an expert no token picks, and a rank of an expert group
whose experts no token picks (it receives nothing, and every split towards it is zero).

Under the tasks' routings such calls are rare (an empty expert in about 2% of calls of fused_moe_fwd at
tiny), so a grouped GEMM that indexes experts by their rank among the experts present, or an exchange that
mishandles a zero split, passed most steps (issue 42). Here the routing's gate logits are rewritten before
the top-k, on every rank of every group alike: the chosen experts' logits are lowered below every other
logit of each token, so no token picks them; the gate weights (a softmax over the k picked) are those of
the picks that remain. The rewrite keeps a valid routing where one exists (k picks among the others) and
leaves the call plain where none does (E - chosen < k), which the clauses' `applies` says.

A plain module, not a task package (`pkb_env.task.task_names()` skips names starting with an underscore).
"""
from __future__ import annotations

from typing import Callable, Mapping

import torch

from pkb_env.contract import Clause, Edge, Routing, Trial

EMPTY_EXPERT = "an expert no token picks"
IDLE_RANK = "a rank whose experts no token picks"


def _lowered(logits: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """`logits` (T, E) with `columns` below every other logit of each row (so no top-k picks them)."""
    out = logits.clone()
    out[:, columns] = logits.min(dim=1, keepdim=True).values - 1.0
    return out


def _sizes(routing: Routing, env: Mapping[str, float]) -> tuple[int, int, int]:
    """(experts, picks per token, ranks of the group) of `routing` at these sizes."""
    return routing.experts.integer(env), routing.k.integer(env), int(env[routing.group])


def can_empty_expert(routing: Routing) -> Callable[[Mapping[str, float]], bool]:
    """Sizes at which a token can leave an expert out: E > K."""
    def applies(env):
        experts, k, _ = _sizes(routing, env)
        return experts > k
    return applies


def can_idle_rank(routing: Routing) -> Callable[[Mapping[str, float]], bool]:
    """Sizes at which a token can leave a whole rank's experts out: a group of two ranks or more, and K picks
    among the other ranks' experts."""
    def applies(env):
        experts, k, ranks = _sizes(routing, env)
        return ranks > 1 and experts - experts // ranks >= k
    return applies


def _emptied(experts: int, ranks: int, gen: torch.Generator) -> torch.Tensor:
    """The expert an edge case empties: the first expert of a rank drawn per call, so that its rank's other
    experts, after it, still receive pairs (an expert indexed by its place among the experts present is then
    the wrong one; emptying a rank's last expert shifts nothing, and a hot expert's neighbours are sometimes
    empty by chance)."""
    rank = torch.randint(ranks, (1,), generator=gen, device=gen.device).cpu()
    return rank * (experts // ranks)


def empty_expert_edge(routing: Routing) -> Edge:
    """One expert, drawn per call, that no token of any rank picks (the same expert in every group)."""
    def rewrite(logits, draw):
        experts, k, ranks = _sizes(routing, draw.env)
        return _lowered(logits, _emptied(experts, ranks, draw.gen)) if experts > k else logits
    return Edge("empty_expert", routing.name, rewrite, EMPTY_EXPERT, everywhere=True)


def idle_rank_edge(routing: Routing) -> Edge:
    """One rank of each group, drawn per call (the same position in every group), whose experts no token of
    any rank picks: it receives nothing, and every rank's split towards it is zero."""
    def rewrite(logits, draw):
        experts, k, ranks = _sizes(routing, draw.env)
        rank = int(torch.randint(ranks, (1,), generator=draw.gen, device=draw.gen.device))
        local = experts // ranks
        if ranks < 2 or experts - local < k:
            return logits
        return _lowered(logits, torch.arange(rank * local, (rank + 1) * local, device=logits.device))
    return Edge("idle_rank", routing.name, rewrite, IDLE_RANK, everywhere=True)


def routing_edges(routing: Routing) -> tuple[Edge, ...]:
    return empty_expert_edge(routing), idle_rank_edge(routing)


# -- what a trial's inputs say: pairs per expert, per group ---------------------------------------------
def expert_loads(trial: Trial, group: str, experts: int, picks: Callable[[dict], torch.Tensor]) -> list[torch.Tensor]:
    """Per group over mesh dim `group`: the (token, expert) pairs each of its `experts` experts receives from
    the group's ranks; `picks(args)` gives a rank's picks as expert indices (any shape)."""
    layout = trial.world.layout
    return [torch.bincount(torch.cat([picks(trial.inputs[r]).flatten().cpu() for r in ranks]), minlength=experts)
            for ranks in layout.groups(layout.group_key(group))]


def has_empty_expert(loads: list[torch.Tensor], ranks: int) -> bool:
    """An expert with no pairs before one of its rank's experts with pairs (where a rank holds one expert: any
    expert with none)."""
    for load in loads:
        per_rank = load.view(ranks, -1)
        later = per_rank.flip(1).cumsum(1).flip(1) - per_rank        # pairs of the rank's experts after each
        if bool(((per_rank == 0) & ((later > 0) | (per_rank.shape[1] == 1))).any()):
            return True
    return False


def has_idle_rank(loads: list[torch.Tensor], ranks: int) -> bool:
    return any(bool((load.view(ranks, -1).sum(dim=1) == 0).any()) for load in loads)


def routing_clauses(routing: Routing, picks: Callable[[dict], torch.Tensor], what: str,
                    expert: bool = True) -> tuple[Clause, ...]:
    """The rules the two edge cases reach, for a task whose inputs give each rank's picks (`picks`); `what`
    says what the statement does with them; `expert=False`: the task sees ranks only (counts per rank)."""
    def loads(trial: Trial) -> list[torch.Tensor]:
        return expert_loads(trial, routing.group, routing.experts.integer(trial.world.sizes), picks)

    def idle(trial: Trial) -> bool:
        return has_idle_rank(loads(trial), int(trial[routing.group]))

    def empty(trial: Trial) -> bool:
        return has_empty_expert(loads(trial), int(trial[routing.group]))

    found = []
    if expert:
        found.append(Clause("empty_expert", f"{EMPTY_EXPERT}: {what} with zero pairs for it, before one of its "
                            f"rank's experts that has pairs", empty,
                            "edge case empty_expert (a rank's first expert: its gate logits lowered for "
                            "every token)", edge="empty_expert", applies=can_empty_expert(routing),
                            where="E = K: every token picks every expert"))
    found.append(Clause("idle_rank", f"{IDLE_RANK}: it receives nothing and every split towards it is zero",
                        idle, "edge case idle_rank (its experts' gate logits lowered for every token)",
                        edge="idle_rank", applies=can_idle_rank(routing),
                        where="groups of one rank, or too few experts elsewhere for K picks"))
    return tuple(found)


# -- a rank's own one-hot mask (PKB 26, drawn per rank, not a Routing) ----------------------------------
def _mask_without(mask: torch.Tensor, excluded: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A one-hot mask (E, K, T) whose tokens pick none of `excluded`: each token keeps its other picks and
    takes the rest from the experts left, at random."""
    experts, k, tokens = mask.shape
    picked = mask.sum(dim=1).T.bool()                                                   # (T, E)
    score = torch.rand((tokens, experts), generator=gen, device=gen.device).to(mask.device) + 2.0 * picked
    score[:, excluded] = -1.0
    return torch.nn.functional.one_hot(score.topk(k, dim=-1).indices, experts).permute(2, 1, 0).contiguous() \
        .to(mask.dtype)


def mask_edges(ranks: str = "W") -> tuple[Edge, ...]:
    """empty_expert and idle_rank for a task whose input is each rank's own one-hot mask (E, K, T): the same
    experts left out on every rank; `ranks`: the group's size, a size name."""
    def empty(mask, draw):
        experts, k = mask.shape[0], mask.shape[1]
        expert = _emptied(experts, int(draw.env[ranks]), draw.gen)
        return _mask_without(mask, expert, draw.gen) if experts > k else mask

    def idle(mask, draw):
        experts, k, size = mask.shape[0], mask.shape[1], int(draw.env[ranks])
        rank = int(torch.randint(size, (1,), generator=draw.gen, device=draw.gen.device))
        local = experts // size
        if size < 2 or experts - local < k:
            return mask
        return _mask_without(mask, torch.arange(rank * local, (rank + 1) * local, device=mask.device), draw.gen)

    return (Edge("empty_expert", "expert_mask", empty, EMPTY_EXPERT, everywhere=True),
            Edge("idle_rank", "expert_mask", idle, IDLE_RANK, everywhere=True))
