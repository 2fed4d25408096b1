"""The device mesh a task declares: named parallel dimensions, and the process groups the judge builds from it.

Modelled on PyTorch's `init_device_mesh(device, (cp, tp), mesh_dim_names=("cp", "tp"))` and torchtitan's
`ParallelDims`: a task names its dimensions once, outermost first, and receives groups by name. Rank r's
coordinates are r written in the mixed radix of the sizes, so the last dimension varies fastest:
`Mesh(("cp", "W / 2"), ("tp", 2))` puts ranks 2c and 2c+1 in one tensor-parallel group (Megatron's
"tp-cp" order, tensor parallelism innermost).

Sizes are expressions of `W`, of the preset's dims and of other mesh dimensions (contract v3): an expert
group as wide as the experts allow, `Mesh(("dp", "W / ep"), ("ep", "min(E, W)"))`. A mesh that names a
preset dim has one layout per preset; the judge builds the groups of every preset's layout when the task
is loaded, before any candidate code runs (ranks/server.py), and a world size that does not factor is
refused with the dimension, its expression and the sizes that broke it.

A process group spans one mesh dimension or several (`Group("g", ("dp", "ep"))`): the ranks that share
every other coordinate, in rank order (torch's `new_group` sorts its ranks).

A task without a mesh has one dimension, `world`, spanning every rank in rank order.

The mesh also defines who may know which random stream (see `scope_key`): a tensor replicated over `tp`
and sharded over `cp` is drawn from a seed that exactly the ranks holding that shard receive.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Union

from pkb_env.contract.expr import ExprError, Size, as_expr

SHARED = "shared"  # the scope key of draws every rank receives

GroupDims = Union[str, tuple[str, ...]]
"""What a group spans: one mesh dimension ("tp") or several ("dp", "ep")."""


class MeshError(ValueError):
    """A mesh that does not fit the world size, or names a dimension that does not exist."""


class Mesh:
    """Named parallel dimensions, outermost first: `Mesh(("dp", 2), ("tp", "W / 2"))`; a size may name W,
    the preset's dims and the other dimensions (`Mesh(("dp", "W / ep"), ("ep", "min(E, W)"))`)."""

    def __init__(self, *dims: tuple[str, Size]):
        if not dims:
            raise MeshError("a Mesh needs at least one (name, size) dimension")
        names = [d[0] for d in dims]
        for name in names:
            if not isinstance(name, str) or not name.isidentifier() or name == "W":
                raise MeshError(f"mesh dimension names must be identifiers other than 'W', got {name!r}")
        if len(set(names)) != len(names):
            raise MeshError(f"mesh dimension names repeat: {names}")
        self.dims: tuple[tuple[str, Any], ...] = tuple((name, as_expr(size)) for name, size in dims)
        for name, size in self.dims:
            if name in size.names:
                raise MeshError(f"mesh dimension {name} = {size} names itself")
        self._order()  # refuses sizes that depend on each other in a cycle
        self._resolved: dict[tuple, MeshLayout] = {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    @property
    def preset_names(self) -> frozenset[str]:
        """The preset dims the sizes name (empty: the mesh depends on W only)."""
        names: set[str] = set()
        for _, size in self.dims:
            names |= size.names
        return frozenset(names - {"W"} - set(self.names))

    def _order(self) -> list[tuple[str, Any]]:
        """The dimensions in an order where each size names only dimensions before it."""
        done: set[str] = set()
        order: list[tuple[str, Any]] = []
        pending = list(self.dims)
        while pending:
            ready = [(n, s) for n, s in pending if not (s.names & set(self.names)) - done]
            if not ready:
                names = ", ".join(f"{n} = {s}" for n, s in pending)
                raise MeshError(f"mesh dimension sizes depend on each other in a cycle: {names}; size one of "
                                f"them from W and the preset's dims")
            for item in ready:
                order.append(item)
                done.add(item[0])
                pending.remove(item)
        return order

    def resolve(self, world_size: int, dims: Mapping[str, int] | None = None) -> MeshLayout:
        """The mesh at `world_size` with the preset's `dims` (needed only where a size names one); remembered,
        as a rank resolves it for every input set it makes (hundreds a burst)."""
        key = (world_size, tuple(sorted((dims or {}).items())))
        if key not in self._resolved:
            self._resolved[key] = self._resolve(world_size, dims)
        return self._resolved[key]

    def _resolve(self, world_size: int, dims: Mapping[str, int] | None) -> MeshLayout:
        missing = self.preset_names - set(dims or {})
        if missing:
            raise MeshError(f"the mesh {self.describe()} names the preset's {', '.join(sorted(missing))}: resolve "
                            f"it with the preset's dims (TaskSpec.layout(world_size, dims))")
        env: dict[str, float] = {**(dims or {}), "W": world_size}
        given = "" if not self.preset_names else \
            " with " + ", ".join(f"{n}={env[n]}" for n in sorted(self.preset_names))
        for name, size in self._order():
            try:
                value = size.integer(env)
            except ExprError as exc:
                raise MeshError(f"mesh dimension {name} = {size} at world size {world_size}{given}: {exc}") from None
            if value < 1:
                raise MeshError(f"mesh dimension {name} = {size} is {value} at world size {world_size}{given}")
            env[name] = value
        sizes = tuple(int(env[name]) for name in self.names)
        total = 1
        for s in sizes:
            total *= s
        if total != world_size:
            shape = " x ".join(f"{n}={s}" for n, s in zip(self.names, sizes))
            raise MeshError(f"the mesh {shape} holds {total} ranks, not the world size {world_size}{given}")
        return MeshLayout(self.names, sizes)

    def describe(self) -> str:
        return " x ".join(f"{name}={size}" for name, size in self.dims)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mesh) and self.dims == other.dims

    def __hash__(self) -> int:
        return hash(self.dims)

    def __repr__(self) -> str:
        return f"Mesh({', '.join(repr((n, str(s))) for n, s in self.dims)})"


FLAT = Mesh(("world", "W"))
"""The mesh of a task that declares none: one dimension over every rank."""


@dataclass(frozen=True)
class MeshLayout:
    """A mesh at one world size: coordinates, groups and seed scopes of every rank."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def world_size(self) -> int:
        total = 1
        for s in self.sizes:
            total *= s
        return total

    def size(self, name: str) -> int:
        return self.sizes[self._index(name)]

    def group_size(self, dims: GroupDims) -> int:
        """The ranks in one group over `dims` (a dimension or several): the product of their sizes."""
        total = 1
        for name in self.group_key(dims):
            total *= self.size(name)
        return total

    def group_key(self, dims: GroupDims) -> tuple[str, ...]:
        """`dims` as a tuple of mesh dimensions in mesh order (the order their ranks are numbered in)."""
        names = (dims,) if isinstance(dims, str) else tuple(dims)
        if not names or len(set(names)) != len(names):
            raise MeshError(f"a group spans one mesh dimension or several distinct ones, got {dims!r}")
        for name in names:
            self._index(name)
        return tuple(n for n in self.names if n in names)

    def coords(self, rank: int) -> dict[str, int]:
        """Rank r's coordinate along every dimension (the last dimension varies fastest)."""
        if not 0 <= rank < self.world_size:
            raise MeshError(f"rank {rank} is outside a mesh of {self.world_size} ranks")
        out = {}
        for name, size in reversed(list(zip(self.names, self.sizes))):
            out[name] = rank % size
            rank //= size
        return {name: out[name] for name in self.names}

    def rank_of(self, coords: dict[str, int]) -> int:
        rank = 0
        for name, size in zip(self.names, self.sizes):
            rank = rank * size + coords[name]
        return rank

    def group_of(self, dims: GroupDims, rank: int) -> tuple[int, ...]:
        """The ranks of `rank`'s group over `dims` (one mesh dimension or several): those that differ from
        it only in those coordinates, in rank order."""
        key = self.group_key(dims)
        base = self.coords(rank)
        members = []
        for index in itertools.product(*(range(self.size(n)) for n in key)):
            members.append(self.rank_of({**base, **dict(zip(key, index))}))
        return tuple(sorted(members))

    def groups(self, dims: GroupDims) -> list[tuple[int, ...]]:
        """Every group over `dims`, in the order of the ranks that lead them (the order groups are built in)."""
        seen: dict[tuple[int, ...], None] = {}
        for rank in range(self.world_size):
            seen.setdefault(self.group_of(dims, rank), None)
        return list(seen)

    def scope_key(self, scope: Iterable[str], rank: int) -> str:
        """The seed name for draws that vary over the dims in `scope` and are replicated over the rest.

        Ranks that agree on their coordinates in `scope` get the same key (and so the same values); the
        empty scope is SHARED (every rank), the full scope is the rank's own.
        """
        scope = set(scope)
        for name in scope:
            self._index(name)
        coords = self.coords(rank)
        parts = [f"{name}={coords[name]}" for name in self.names if name in scope]
        return ",".join(parts) if parts else SHARED

    def scope_keys(self, rank: int) -> list[str]:
        """Every seed name rank r may hold: one per subset of the mesh's dims (2**dims of them)."""
        keys = []
        for n in range(len(self.names) + 1):
            for subset in itertools.combinations(self.names, n):
                keys.append(self.scope_key(subset, rank))
        return keys

    def describe(self) -> str:
        shape = " x ".join(f"{n}={s}" for n, s in zip(self.names, self.sizes))
        if len(self.names) == 1:
            return shape
        terms = []
        stride = 1
        for name, size in reversed(list(zip(self.names, self.sizes))):
            terms.append(f"{name}_rank" if stride == 1 else f"{name}_rank*{stride}")
            stride *= size
        return f"{shape} (rank = {' + '.join(reversed(terms))})"

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise MeshError(f"the mesh has no dimension {name!r}; it has {', '.join(self.names)}")
        return self.names.index(name)


def group_name(dims: GroupDims) -> str:
    """A group's key in the built groups and in cost terms: "tp", or "dp,ep" for several dimensions."""
    return dims if isinstance(dims, str) else ",".join(dims)


@dataclass(frozen=True)
class GroupInfo:
    """What a golden implementation (one process, no process groups) receives for a Group input."""

    name: str
    ranks: tuple[int, ...]
    rank: int             # this rank's index in `ranks`

    @property
    def size(self) -> int:
        return len(self.ranks)


def build_groups(layout: MeshLayout, rank: int, names: Iterable[GroupDims]) -> dict[str, Any]:
    """This rank's process group over each of `names` (a dimension or a tuple of them), keyed by
    `group_name`, built collectively (every rank must call this).

    Every group of every requested span is created on every rank, in the same order (torch's `new_group`
    is collective over the default group), and each rank keeps the ones it belongs to. A span of every
    dimension (the flat mesh's `world`) is the default group itself.
    """
    import torch.distributed as dist

    keys = sorted({layout.group_key(n) for n in names}, key=lambda k: [layout.names.index(d) for d in k])
    mine: dict[str, Any] = {}
    for key in keys:
        if key == layout.names:
            mine[group_name(key)] = dist.group.WORLD
            continue
        for ranks in layout.groups(key):
            group = dist.new_group(list(ranks))
            if rank in ranks:
                mine[group_name(key)] = group
    return mine


class GroupCache:
    """One process's mesh groups, built once per mesh shape: a rank set that loads many tasks (the judge's
    reference ranks, the golden test's ranks) never rebuilds them, and never inside a timed call."""

    def __init__(self) -> None:
        self._built: dict[tuple, dict[str, Any]] = {}

    def groups(self, layout: MeshLayout, rank: int, names: Iterable[GroupDims]) -> dict[str, Any]:
        names = tuple(names)
        key = (layout.names, layout.sizes, names)
        if key not in self._built:
            self._built[key] = build_groups(layout, rank, names)
        return self._built[key]
