"""Top-k routing drawn jointly over a group of ranks (contract v3): MoE dispatch and combine, expert parallelism.

A `Length` draws each rank's size on its own; an MoE layer's splits are not independent: rank r sends to rank
s exactly what s receives from r, and both follow from where every token's top-k experts live. A task declares
a `Routing` (`TaskSpec(..., routings=(Routing("route", tokens="T", experts="E", k="K", group="ep"),))`) and
takes what it needs of it as inputs, `Tensor("topk_idx", ("T", "K"), "int64", Routed("route", "topk_idx"))`.

Per call, every rank of a group draws the whole group's gate logits from the seed the group shares (the scope
of the mesh dims outside the group, so different groups route differently): standard normal per token and
expert, plus, with `skew`, a per-expert popularity bias drawn per call (`skew` is its standard deviation: some
experts are hot in one call and cold in the next, as in a real layer). Each token picks its k largest logits;
its weights are the softmax over those k (Mixtral's and DeepSeek's normalisation). Experts are placed
contiguously, E / G per rank of a group of G. Every count follows from that one draw, so the counts agree
across ranks (rank r's `send_counts[s]` is rank s's `recv_counts[r]`), are uneven and change every call.

The fields (`FIELDS`), per rank: its tokens' `logits` (T, E), `topk_idx` (T, K) and `topk_weights` (T, K); the
(token, expert) pairs it sends to each rank of its group, `send_counts` (G,), receives from each,
`recv_counts` (G,), sends to each expert, `expert_counts` (E,), and receives from each source per local expert,
`recv_expert_counts` (G, E / G), and its picks as a one-hot mask, `expert_mask` (E, K, T) (Hugging Face
Mixtral's `one_hot(topk_idx, E).permute(2, 1, 0)`, contiguous: what Megatron's and PKB's MoE preprocessing
read; 1 where token t's k-th pick is expert e). The tokens themselves (hidden states) stay ordinary per-rank inputs, secret
from peers; the routing is drawn fresh per call from the step's secret, and a rank holds only its group's.

An edge case may rewrite a routing's gate logits (`Edge(name, "route", apply, ...)`, contract/edges.py): every
member's logits alike, before the top-k, on the call whose shared seed picks it (an expert no token picks: its
column lowered below every other logit), in the ranks' input maker and in the judge's redraw for the cost model.

The cost model sees the realised imbalance: `c.routing("route")` gives the busiest rank's pairs to or from
other ranks and received in all, averaged over the calls the judge timed (judge/context.py), and where no call
exists (the prompt, the catalogue, the world-size checks) the balanced figures, T K (G-1)/G and T K, which
are the expected mean rank's and so at most the expected busiest rank's: a cost model stays a lower bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from pkb_env.contract.distributions import Distribution
from pkb_env.contract.edges import Edge, EdgeDraw, edge_generator, edge_of
from pkb_env.contract.expr import Size, as_expr, show
from pkb_env.contract.mesh import SHARED, GroupDims, MeshLayout, group_name
from pkb_env.contract.seeding import derive_seed

FIELDS = ("logits", "topk_idx", "topk_weights", "send_counts", "recv_counts", "expert_counts",
          "recv_expert_counts", "expert_mask")


@dataclass(frozen=True)
class Routing:
    """Top-k routing of `tokens` tokens per rank over `experts` experts placed contiguously on the ranks of a
    group over the mesh dims `group`, `k` experts per token; `skew`: the std of a per-expert popularity bias
    drawn per call (0: every expert equally likely)."""

    name: str
    tokens: Size
    experts: Size
    k: Size
    group: GroupDims = "world"
    skew: float = 0.0
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"routing {self.name!r}: the name must be an identifier")
        for attr in ("tokens", "experts", "k"):
            object.__setattr__(self, attr, as_expr(getattr(self, attr)))
        if isinstance(self.group, list):
            object.__setattr__(self, "group", tuple(self.group))
        if self.skew < 0:
            raise ValueError(f"routing {self.name}: skew is a standard deviation, >= 0; got {self.skew}")

    def sizes(self, env: Mapping[str, float], layout: MeshLayout) -> tuple[int, int, int, int]:
        """(tokens, experts, k, group size), checking that the experts split over the group and k fits."""
        tokens, experts, k = (e.integer(env) for e in (self.tokens, self.experts, self.k))
        ranks = layout.group_size(self.group)
        if experts % ranks:
            raise ValueError(f"routing {self.name}: {show(self.experts)} = {experts} experts do not split over the "
                             f"{ranks} ranks of group {group_name(self.group)}")
        if not 1 <= k <= experts or tokens < 1:
            raise ValueError(f"routing {self.name}: needs 1 <= k <= experts and tokens >= 1, got k = {k}, "
                             f"experts = {experts}, tokens = {tokens}")
        return tokens, experts, k, ranks

    def scope(self, layout: MeshLayout) -> tuple[str, ...]:
        """The seed scope the group shares: the mesh dims outside it."""
        inside = layout.group_key(self.group)
        return tuple(n for n in layout.names if n not in inside)

    def describe(self, env: Mapping[str, float], layout: MeshLayout) -> str:
        tokens, experts, k, ranks = self.sizes(env, layout)
        popularity = f"a per-expert popularity bias of std {self.skew:g} drawn per call" if self.skew else \
            "every expert equally likely"
        doc = f" -- {self.doc}" if self.doc else ""
        return (f"routing {self.name}: each of {tokens} tokens per rank picks its top {k} of {experts} experts by "
                f"gate logits drawn per call (standard normal, {popularity}); weights are the softmax over the "
                f"{k} picked; experts {experts // ranks} per rank of the {ranks}-rank group "
                f"{group_name(self.group)}, contiguously (expert e on group rank e // {experts // ranks}){doc}")


@dataclass(frozen=True)
class Routed(Distribution):
    """An input taken from a routing's call: one of `FIELDS`, this rank's part (not drawn on its own)."""

    routing: str
    field: str
    kinds: frozenset[str] = frozenset({"float", "int"})

    def __post_init__(self) -> None:
        if self.field not in FIELDS:
            raise ValueError(f"Routed({self.routing!r}, {self.field!r}): the field must be one of {', '.join(FIELDS)}")

    def draw(self, gen, shape, dtype, env):
        raise TypeError(f"Routed({self.routing!r}, {self.field!r}) is taken from the call's routing, not drawn")

    def describe(self) -> str:
        return f"{self.field} of routing {self.routing} (drawn jointly over the group, see above)"


RECEIVING = frozenset({"recv_counts", "recv_expert_counts"})
"""Fields that need every member's picks; the others need only the rank's own (drawn alone, G times cheaper)."""


@dataclass(frozen=True)
class RoutedCall:
    """One call's routing over one group: the drawn members' logits, picks and weights, and their counts."""

    ranks: int                                   # G, the members of the group
    experts: int
    logits: dict[int, torch.Tensor]              # member -> (T, E) float32
    topk_idx: dict[int, torch.Tensor]            # member -> (T, K) int64
    topk_weights: dict[int, torch.Tensor]        # member -> (T, K) float32

    def expert_counts(self, member: int) -> torch.Tensor:
        """(E,): the pairs `member` sends to each expert."""
        return torch.bincount(self.topk_idx[member].flatten(), minlength=self.experts)

    def send_counts(self, member: int) -> torch.Tensor:
        """(G,): the pairs `member` sends to each member (experts placed contiguously)."""
        return self.expert_counts(member).view(self.ranks, -1).sum(-1)

    def field(self, name: str, member: int) -> torch.Tensor:
        """Member `member`'s part of field `name` (FIELDS)."""
        if name == "send_counts":
            return self.send_counts(member)
        if name == "expert_counts":
            return self.expert_counts(member)
        if name == "recv_counts":
            return torch.stack([self.send_counts(s)[member] for s in range(self.ranks)])
        if name == "expert_mask":
            return torch.nn.functional.one_hot(self.topk_idx[member], self.experts).permute(2, 1, 0).contiguous()
        if name == "recv_expert_counts":
            per = self.experts // self.ranks
            return torch.stack([self.expert_counts(s)[member * per:(member + 1) * per] for s in range(self.ranks)])
        return getattr(self, name)[member].clone()


def draw_call(routing: Routing, seed: int, env: Mapping[str, float], layout: MeshLayout,
              members: Sequence[int] | None = None, edge: Edge | None = None, shared: int = 0) -> RoutedCall:
    """The routing of one group for the call whose group seed is `seed` (every member computes the same):
    the picks of `members` (default: every member), each from its own stream, so a rank that needs only its
    own picks draws only its own logits. `edge`: the call's edge case where it rewrites this routing's gate
    logits (every member's alike, from the generator of the call's `shared` seed). On the CPU: the judge
    redraws it for the cost model."""
    tokens, experts, k, ranks = routing.sizes(env, layout)
    bias = None
    if routing.skew:
        gen = torch.Generator()
        gen.manual_seed(derive_seed(seed, "routing", routing.name, "popularity"))
        bias = routing.skew * torch.randn((experts,), generator=gen)
    logits, idx, weights = {}, {}, {}
    for member in range(ranks) if members is None else members:
        gen = torch.Generator()
        gen.manual_seed(derive_seed(seed, "routing", routing.name, member))
        logits[member] = torch.randn((tokens, experts), generator=gen)
        if bias is not None:
            logits[member] += bias
        if edge is not None:
            draw = EdgeDraw(edge_generator(shared, torch.device("cpu")), True, env, {"member": member})
            logits[member] = edge.rewrites[routing.name](logits[member], draw)
        top = logits[member].topk(k, dim=-1)
        idx[member], weights[member] = top.indices, torch.softmax(top.values, dim=-1)
    return RoutedCall(ranks, experts, logits, idx, weights)


@dataclass(frozen=True)
class RoutedLoad:
    """What the cost model reads of a routing: (token, expert) pairs of the busiest rank, to or from OTHER
    ranks (`offrank_pairs`, what an all-to-all-v moves) and received in all (`received_pairs`, its experts'
    work); averaged over the timed calls (`calls` of them), or the balanced figures where no call exists."""

    offrank_pairs: float
    received_pairs: float
    calls: int = 0

    @property
    def realised(self) -> bool:
        return self.calls > 0


def balanced_load(routing: Routing, env: Mapping[str, float], layout: MeshLayout) -> RoutedLoad:
    """The figures without a call: the mean rank's expectation, T K (G-1)/G off rank and T K received."""
    tokens, _, k, ranks = routing.sizes(env, layout)
    return RoutedLoad(tokens * k * (ranks - 1) / ranks, float(tokens * k))


def realised_load(routing: Routing, calls: Sequence[Sequence[Mapping[str, int]]], env: Mapping[str, float],
                  layout: MeshLayout, edges: Sequence[Edge] = ()) -> RoutedLoad:
    """The busiest rank's figures averaged over `calls` (each: every rank's seeds for that call, as handed to
    the ranks), computed by whoever holds every rank's seeds (the judge); `edges`: the task's edge cases,
    which rewrite the routing of the calls they fall on as the ranks' input maker does."""
    scope = routing.scope(layout)
    offrank = received = 0.0
    for seeds in calls:
        worst_off = worst_in = 0
        shared = seeds[0][SHARED]
        edge = edge_of(shared, edges)
        edge = edge if edge is not None and routing.name in edge.rewrites else None
        for ranks in layout.groups(layout.group_key(routing.group)):
            call = draw_call(routing, group_seed(seeds[ranks[0]], scope, layout, ranks[0]), env, layout, None,
                             edge, shared)
            send = torch.stack([call.send_counts(m) for m in range(call.ranks)])   # (G, G): from i to j
            own = send.diagonal()
            worst_off = max(worst_off, int((send.sum(1) - own).max()), int((send.sum(0) - own).max()))
            worst_in = max(worst_in, int(send.sum(0).max()))
        offrank += worst_off
        received += worst_in
    return RoutedLoad(offrank / len(calls), received / len(calls), len(calls))


def group_seed(seeds: Mapping[str, int], scope: Sequence[str], layout: MeshLayout, rank: int) -> int:
    """A rank's seed of its routing group for a call (from the seeds the judge handed it for that call)."""
    key = layout.scope_key(scope, rank)
    if key not in seeds:
        raise KeyError(f"rank {rank} holds no seed for scope {key!r}: the seeds were made for another mesh")
    return seeds[key]
