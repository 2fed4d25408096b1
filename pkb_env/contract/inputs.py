"""Making one rank's inputs from its declared inputs and its secret seeds.

The judge derives, per call and per rank, one seed for every *scope* the rank belongs to (see
`MeshLayout.scope_key`): `shared` (every rank), the rank's own, and for a mesh one per subset of its
dims (`cp=1` is held by exactly the ranks whose cp coordinate is 1). An input is drawn from the seed of
its layout's scope, mixed with the input's name so that inputs never share a stream. Seeds are one-way
hashes of a per-step secret, so a rank holding its own cannot compute a peer's. A call's Lengths (ragged
sizes) are drawn first, the same way; inputs that read others (`reads`) are made after those: computed
from them (`FromInputs`, no seed) or drawn given them (`Custom`, from their own stream).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from pkb_env.contract import sparse
from pkb_env.contract.distributions import Custom, FromInputs, Given
from pkb_env.contract.edges import Edge, EdgeDraw, edge_generator, edge_of, holder
from pkb_env.contract.io import Const, Group, Input, Length, Scalar, Sharded, Tensor, resolve_dtype
from pkb_env.contract.mesh import SHARED, GroupInfo, MeshLayout, group_name
from pkb_env.contract.routing import RECEIVING, Routed, RoutedCall, Routing, draw_call, group_seed
from pkb_env.contract.seeding import derive_seed

RankSeeds = Mapping[str, int]
"""A rank's seeds for one call: scope key -> seed (only the scopes this rank belongs to)."""


def rank_seeds(secret: int, layout: MeshLayout, rank: int, *purpose: object) -> dict[str, int]:
    """Rank `rank`'s seeds for the call named by `purpose`: one per scope it belongs to, and no other."""
    return {key: derive_seed(secret, *purpose, key) for key in layout.scope_keys(rank)}


@dataclass(frozen=True)
class InputContext:
    """What one rank knows when it makes its inputs: who it is, the sizes, its seeds and its groups.

    `groups` maps mesh dims to this rank's process groups (built by the judge at load); None in a single
    process (the golden test, the judge's own checks), where Group inputs become GroupInfo records.
    """

    rank: int
    world_size: int
    dims: Mapping[str, int]
    dtype: str
    device: torch.device
    seeds: RankSeeds
    layout: MeshLayout
    rng_device: torch.device = torch.device("cpu")   # where draws are made before moving to `device`
    groups: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def env(self) -> dict[str, float]:
        return size_env(self.dims, self.world_size, self.layout)

    def generator(self, scope: Sequence[str], name: str) -> torch.Generator:
        """The stream of input `name` at `scope`; draws are made on `rng_device` (the CPU where a CPU
        reference checks ranks on GPUs, so both draw alike; the ranks' device where all are on GPUs)."""
        key = self.layout.scope_key(scope, self.rank)
        if key not in self.seeds:
            raise KeyError(f"rank {self.rank} holds no seed for scope {key!r}: the seeds were made for "
                           f"another mesh")
        gen = torch.Generator(device=self.rng_device)
        gen.manual_seed(derive_seed(self.seeds[key], "input", name))
        return gen


def size_env(dims: Mapping[str, int], world_size: int, layout: MeshLayout) -> dict[str, float]:
    """The names size expressions may use: the preset's dims, W, and the mesh's dimension sizes."""
    env: dict[str, float] = dict(dims)
    env["W"] = world_size
    for name, size in zip(layout.names, layout.sizes):
        env.setdefault(name, size)
    return env


def reads(decl: Input) -> tuple[str, ...]:
    """The inputs whose values an input's depend on (made before it): a Custom's or FromInputs' `reads`."""
    return tuple(getattr(decl.dist, "reads", ())) if isinstance(decl, Tensor) else ()


def make_inputs(declared: Sequence[Input], ctx: InputContext, lengths: Sequence[Length] = (),
                edges: Sequence[Edge] = (), routings: Sequence[Routing] = ()) -> tuple:
    """This rank's arguments for one call, in declaration order; the call's lengths are drawn first, and
    inputs that read others after the rest (each input has its own stream: the order changes no value).
    Where the call's shared seed picks one of the task's `edges`, its input is rewritten as it is drawn.
    A routing's inputs (`Routed`) are this rank's part of its group's routing for the call (routing.py)."""
    env = call_env(ctx, lengths, edges)
    edge = edge_of(ctx.seeds[SHARED], edges) if edges else None
    rewrites = edge.rewrites if edge is not None else {}
    calls = {}
    for routing in routings:
        fields = {d.dist.field for d in declared if isinstance(getattr(d, "dist", None), Routed)
                  and d.dist.routing == routing.name}
        if fields:
            calls[routing.name] = _routed_call(routing, ctx, env, every=bool(fields & RECEIVING),
                                               edge=edge if routing.name in rewrites else None)
    made: dict[str, Any] = {}
    for decl in sorted(declared, key=lambda d: bool(reads(d))):
        if isinstance(decl, Tensor) and isinstance(decl.dist, Routed):
            made[decl.name] = _routed(decl, ctx, env, calls[decl.dist.routing], routings)
        elif isinstance(decl, Tensor):
            made[decl.name] = _tensor(decl, ctx, env, made, edge if decl.name in rewrites else None)
        elif isinstance(decl, Scalar):
            made[decl.name] = draw_scalar(decl, ctx, env, edge)
        elif isinstance(decl, Const):
            made[decl.name] = decl.resolve(env, ctx.dtype)
        elif isinstance(decl, Group):
            made[decl.name] = _group(decl, ctx)
        else:
            raise TypeError(f"unknown input declaration {decl!r}")
    return tuple(made[d.name].to(ctx.device) if isinstance(d, Tensor) else made[d.name] for d in declared)


def call_env(ctx: InputContext, lengths: Sequence[Length] = (), edges: Sequence[Edge] = ()) -> dict[str, float]:
    """The sizes of one call on this rank: the preset's dims, W, the mesh, and the call's lengths as drawn (an
    edge case's rewrite included). Also what the judge redraws of a failing timed call (judge/timed_causes.py)."""
    env = dict(ctx.env)
    edge = edge_of(ctx.seeds[SHARED], edges) if edges else None
    rewrites = edge.rewrites if edge is not None else {}
    for length in lengths:
        env[length.name] = length.dist.scalar(ctx.generator(length.layout.scope(ctx.layout), length.name), env)
        if length.name in rewrites:
            value = rewrites[length.name](env[length.name], _edge_draw(length, ctx, env, edge))
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"length {length.name}: edge case {edge.name!r} made {value!r}, not an int >= 0")
            env[length.name] = value
    return env


def draw_scalar(decl: Scalar, ctx: InputContext, env: Mapping[str, float], edge: Edge | None = None) -> int | float:
    """A Scalar input's value in one call on this rank (from its own stream), as the call's edge case (where it
    rewrites this scalar: a root other than 0) leaves it."""
    value = decl.dist.scalar(ctx.generator(decl.layout.scope(ctx.layout), decl.name), env)
    if edge is not None and decl.name in edge.rewrites:
        value = edge.rewrites[decl.name](value, _edge_draw(decl, ctx, env, edge))
    return value


def _tensor(decl: Tensor, ctx: InputContext, env: Mapping[str, float], made: Mapping[str, Any],
            edge: Edge | None = None) -> torch.Tensor:
    """One tensor input on the draw device (`ctx.rng_device`); `made` holds the inputs made before it;
    `edge`: the call's edge case, which rewrites this input."""
    shape = decl.local_shape(env, ctx.layout)
    dtype = resolve_dtype(decl.dtype, ctx.dtype)
    read = {name: made[name] for name in reads(decl)}
    if isinstance(decl.dist, FromInputs):
        value = decl.dist.compute(read, shape, dtype, env)
    elif read:
        gen = ctx.generator(decl.layout.scope(ctx.layout), decl.name)
        value = decl.dist.draw(gen, shape, dtype, env, Given(read, _offsets(decl, shape, ctx)))
    elif decl.sparse is not None and not isinstance(decl.dist, Custom):
        value = sparse.draw(decl.sparse, decl.dist, ctx.generator(decl.layout.scope(ctx.layout), decl.name), shape,
                            dtype, env)
    else:
        value = decl.dist.draw(ctx.generator(decl.layout.scope(ctx.layout), decl.name), shape, dtype, env)
    if edge is not None and isinstance(value, torch.Tensor):
        value = edge.rewrites[decl.name](value, _edge_draw(decl, ctx, env, edge, read))
    layout = torch.strided if decl.sparse is None else decl.sparse.layout
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape or value.dtype != dtype \
            or value.layout != layout:
        got = f"{value.dtype} {tuple(value.shape)}{_sparse(value.layout)}" if isinstance(value, torch.Tensor) \
            else type(value).__name__
        raise ValueError(f"input {decl.name}: the distribution made {got}, the declaration says {dtype} {shape}"
                         f"{_sparse(layout)}")
    return value


def _routed_call(routing: Routing, ctx: InputContext, env: Mapping[str, float], every: bool,
                 edge: Edge | None = None) -> RoutedCall:
    """The call's routing of this rank's group, from the seed the group shares: every member's picks where
    a receive count is asked for (`every`), else only this rank's; `edge`: the call's edge case, which rewrites
    the gate logits. Drawn on the CPU whatever the draw device, so that the judge, which redraws it for the
    cost model, sees the same counts."""
    scope = routing.scope(ctx.layout)
    members = None if every else [ctx.layout.group_of(routing.group, ctx.rank).index(ctx.rank)]
    return draw_call(routing, group_seed(ctx.seeds, scope, ctx.layout, ctx.rank), env, ctx.layout, members,
                     edge, ctx.seeds[SHARED])


def _routed(decl: Tensor, ctx: InputContext, env: Mapping[str, float], call: RoutedCall,
            routings: Sequence[Routing]) -> torch.Tensor:
    """This rank's part of a routing field, in the declared dtype (checked against the declared shape)."""
    routing = next(r for r in routings if r.name == decl.dist.routing)
    member = ctx.layout.group_of(routing.group, ctx.rank).index(ctx.rank)
    value = call.field(decl.dist.field, member).to(resolve_dtype(decl.dtype, ctx.dtype))
    shape = decl.local_shape(env, ctx.layout)
    if tuple(value.shape) != shape:
        raise ValueError(f"input {decl.name}: routing {routing.name}'s {decl.dist.field} is {tuple(value.shape)} on "
                         f"this rank; the declaration says {shape}")
    return value


def _sparse(layout: torch.layout) -> str:
    """A tensor layout in a message: nothing for a dense one, " torch.sparse_coo" for a sparse one."""
    return "" if layout == torch.strided else f" {layout}"


def _edge_draw(decl: Tensor | Length | Scalar, ctx: InputContext, env: Mapping[str, float], edge: Edge,
               given: Mapping[str, torch.Tensor] | None = None) -> EdgeDraw:
    """The edge's shared generator, and whether this rank holds the block (or the length) of the rank it
    lands on; `given`: the values of the inputs `decl` reads."""
    shared = ctx.seeds[SHARED]
    scope = decl.layout.scope(ctx.layout)
    chosen = holder(shared, ctx.world_size)
    here = edge.everywhere or ctx.layout.scope_key(scope, ctx.rank) == ctx.layout.scope_key(scope, chosen)
    return EdgeDraw(edge_generator(shared, ctx.rng_device), here, env, ctx.layout.coords(ctx.rank), given or {})


def _offsets(decl: Tensor, shape: tuple[int, ...], ctx: InputContext) -> tuple[int, ...]:
    """Where this rank's block of `decl` starts in the global tensor, per axis."""
    offsets = [0] * len(shape)
    if isinstance(decl.layout, Sharded):
        axis = decl.layout.axis % len(shape)
        offsets[axis] = decl.layout.block_index(ctx.layout, ctx.rank) * shape[axis]
    return tuple(offsets)


def _group(decl: Group, ctx: InputContext) -> Any:
    key = group_name(ctx.layout.group_key(decl.dim))
    if ctx.groups is not None:
        if key not in ctx.groups:
            raise KeyError(f"input {decl.name}: no process group over {key!r} was built for this rank")
        return ctx.groups[key]
    ranks = ctx.layout.group_of(decl.dim, ctx.rank)
    return GroupInfo(key, ranks, ranks.index(ctx.rank))
