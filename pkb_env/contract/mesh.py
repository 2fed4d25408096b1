"""The device mesh a task declares: named parallel dimensions, and the process groups the judge builds from it.

Modelled on PyTorch's `init_device_mesh(device, (cp, tp), mesh_dim_names=("cp", "tp"))` and torchtitan's
`ParallelDims`: a task names its dimensions once, outermost first, and receives groups by name. Rank r's
coordinates are r written in the mixed radix of the sizes, so the last dimension varies fastest:
`Mesh(("cp", "W / 2"), ("tp", 2))` puts ranks 2c and 2c+1 in one tensor-parallel group (Megatron's
"tp-cp" order, tensor parallelism innermost). Sizes are expressions of `W` only: groups are built once
per rank set when the task is loaded, before any preset is chosen.

A task without a mesh has one dimension, `world`, spanning every rank in rank order.

The mesh also defines who may know which random stream (see `scope_key`): a tensor replicated over `tp`
and sharded over `cp` is drawn from a seed that exactly the ranks holding that shard receive.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterable

from pkb_env.contract.expr import ExprError, Size, as_expr

SHARED = "shared"  # the scope key of draws every rank receives


class MeshError(ValueError):
    """A mesh that does not fit the world size, or names a dimension that does not exist."""


class Mesh:
    """Named parallel dimensions, outermost first: `Mesh(("dp", 2), ("tp", "W / 2"))`."""

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
            if size.names - {"W"}:
                raise MeshError(f"mesh dimension {name} = {size} may use only W (groups are built before a "
                                f"preset is chosen)")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    def resolve(self, world_size: int) -> "MeshLayout":
        sizes = []
        for name, size in self.dims:
            try:
                value = size.integer({"W": world_size})
            except ExprError as exc:
                raise MeshError(f"mesh dimension {name} = {size} at world size {world_size}: {exc}") from None
            if value < 1:
                raise MeshError(f"mesh dimension {name} = {size} is {value} at world size {world_size}")
            sizes.append(value)
        total = 1
        for s in sizes:
            total *= s
        if total != world_size:
            shape = " x ".join(f"{n}={s}" for n, s in zip(self.names, sizes))
            raise MeshError(f"the mesh {shape} holds {total} ranks, not the world size {world_size}")
        return MeshLayout(self.names, tuple(sizes))

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

    def group_of(self, name: str, rank: int) -> tuple[int, ...]:
        """The ranks of `rank`'s group along `name`: those that differ from it only in that coordinate."""
        self._index(name)
        base = self.coords(rank)
        return tuple(self.rank_of({**base, name: i}) for i in range(self.size(name)))

    def groups(self, name: str) -> list[tuple[int, ...]]:
        """Every group along `name`, in the order of the ranks that lead them (the order groups are built in)."""
        seen: dict[tuple[int, ...], None] = {}
        for rank in range(self.world_size):
            seen.setdefault(self.group_of(name, rank), None)
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


@dataclass(frozen=True)
class GroupInfo:
    """What a golden implementation (one process, no process groups) receives for a Group input."""

    name: str
    ranks: tuple[int, ...]
    rank: int             # this rank's index in `ranks`

    @property
    def size(self) -> int:
        return len(self.ranks)


def build_groups(layout: MeshLayout, rank: int, names: Iterable[str]) -> dict[str, Any]:
    """This rank's process group along each of `names`, built collectively (every rank must call this).

    Every group of every requested dimension is created on every rank, in the same order (torch's
    `new_group` is collective over the default group), and each rank keeps the ones it belongs to. The
    flat mesh's `world` dimension is the default group itself.
    """
    import torch.distributed as dist

    wanted = set(names)
    mine: dict[str, Any] = {}
    for name in layout.names:
        if name not in wanted:
            continue
        if layout.names == ("world",):
            mine[name] = dist.group.WORLD
            continue
        for ranks in layout.groups(name):
            group = dist.new_group(list(ranks))
            if rank in ranks:
                mine[name] = group
    return mine


class GroupCache:
    """One process's mesh groups, built once per mesh shape: a rank set that loads many tasks (the judge's
    reference ranks, the golden test's ranks) never rebuilds them, and never inside a timed call."""

    def __init__(self) -> None:
        self._built: dict[tuple, dict[str, Any]] = {}

    def groups(self, layout: MeshLayout, rank: int, names: Iterable[str]) -> dict[str, Any]:
        names = tuple(names)
        key = (layout.names, layout.sizes, names)
        if key not in self._built:
            self._built[key] = build_groups(layout, rank, names)
        return self._built[key]
