"""A task at one size, as its own functions see it: `CostContext` for the cost model, `World` for the golden.

Both read the preset's dims, the world size and the mesh's dimensions by name (`x["K"]`, `x["W"]`,
`x["tp"]`), and offer the byte counts and layout helpers those functions need (docs/task_contract.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from pkb_env.contract.cost import COLLECTIVES, Comm, group_size
from pkb_env.contract.io import DTYPES, OnRanks, Output, PerRank, Replicated, Sharded, Tensor, resolve_dtype
from pkb_env.contract.mesh import MeshLayout
from pkb_env.contract.routing import RoutedLoad, balanced_load
from pkb_env.contract.sparse import parts


@dataclass(frozen=True)
class Sized:
    """A task at one size: what its cost function and its golden both read. `x["K"]`, `x["W"]` and `x["tp"]`
    give a preset dim, the world size and a mesh dimension's size."""

    inputs: tuple            # the task's declared inputs (TaskSpec.inputs)
    outputs: tuple           # and outputs
    sizes: Mapping[str, float]   # the dims, W, the mesh's dimensions, every Length at its smallest (TaskSpec.env)
    dims: Mapping[str, int]
    world_size: int
    dtype: str
    layout: MeshLayout

    def __getitem__(self, name: str) -> int:
        return self.sizes[name]


@dataclass(frozen=True)
class CostContext(Sized):
    """What a task's `cost` function reads: sizes, the dtype, byte counts of declared tensors, and the load a
    routing puts on the busiest rank (realised over the timed calls where the judge has them)."""

    routings: tuple = ()                                   # the task's Routing declarations
    loads: Mapping[str, RoutedLoad] = field(default_factory=dict)   # realised loads, by routing name

    def routing(self, name: str) -> RoutedLoad:
        """The busiest rank's (token, expert) pairs of routing `name`: to or from other ranks, and received in
        all; averaged over the calls timed, or the balanced figures (a lower bound) where no call exists."""
        if name in self.loads:
            return self.loads[name]
        decl = next((r for r in self.routings if r.name == name), None)
        if decl is None:
            raise KeyError(f"no routing named {name!r}; the task declares {[r.name for r in self.routings]}")
        return balanced_load(decl, self.sizes, self.layout)

    @property
    def elem(self) -> int:
        """Bytes per element of the task dtype."""
        return DTYPES[self.dtype].itemsize

    def nbytes(self, name: str) -> int:
        """Bytes of one rank's copy of a declared tensor input or output (the local block if sharded; at
        their smallest for shapes that name a Length)."""
        for decl in (*self.inputs, *self.outputs):
            if decl.name == name and (isinstance(decl, Tensor) or isinstance(decl, Output) and decl.kind == "tensor"):
                shape = decl.local_shape(self.sizes, self.layout)
                if shape is None:
                    raise ValueError(f"{name} has a data-dependent shape: a cost model is a lower bound and cannot "
                                     f"count it at its bound (max_shape); count its least bytes in the cost "
                                     f"function")
                dtype = decl.resolve_dtype(self.dtype) if isinstance(decl, Output) else resolve_dtype(decl.dtype,
                                                                                                      self.dtype)
                if getattr(decl, "sparse", None) is not None:   # a sparse input: its values and indices
                    return decl.sparse.stored_bytes(shape, dtype.itemsize, self.sizes)
                numel = 1
                for s in shape:
                    numel *= s
                return numel * dtype.itemsize
        raise KeyError(f"no tensor input or output named {name!r}")

    def io_bytes(self) -> int:
        """Bytes every rank must at least read (its tensor inputs) and write (its outputs) once."""
        names = [d.name for d in (*self.inputs, *self.outputs)
                 if isinstance(d, Tensor) or isinstance(d, Output) and d.kind == "tensor" and d.shape is not None]
        return sum(self.nbytes(n) for n in names)

    def bus_bytes(self, comms: Sequence[Comm]) -> float:
        """Bytes the busiest rank moves one way for `comms` at this size (S times each bus factor)."""
        total = 0.0
        for comm in comms:
            n = group_size(comm.group, dict(zip(self.layout.names, self.layout.sizes)))
            total += comm.size_bytes * COLLECTIVES[comm.collective].bus_factor(n) if n > 1 else 0.0
        return total

    def cheapest(self, *options: Sequence[Comm]) -> tuple[Comm, ...]:
        """The option, a sequence of Comm terms, that moves the fewest bytes at this size.

        Where a task can be done by moving data or by moving work (gather the operands, or exchange
        partial results), the lower bound is the cheaper one, whichever the reference does; which one is
        cheaper depends on the sizes, so the cost function declares both and this picks."""
        if not options:
            raise ValueError("cheapest() needs at least one option (a tuple of Comm terms)")
        return tuple(min(options, key=self.bus_bytes))


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal tensors, dense or sparse (a sparse one compared part by part: torch.equal refuses it)."""
    pa, pb = list(parts(a, "")), list(parts(b, ""))
    return a.layout == b.layout and a.shape == b.shape and len(pa) == len(pb) and all(
        x.shape == y.shape and torch.equal(x, y) for (_, x), (_, y) in zip(pa, pb))


@dataclass(frozen=True)
class World(Sized):
    """What a golden implementation knows besides the inputs: sizes, the mesh, and layout helpers."""

    def coords(self, rank: int) -> dict[str, int]:
        return self.layout.coords(rank)

    def assemble(self, inputs: list[dict[str, Any]], name: str) -> torch.Tensor:
        """The global tensor of a Sharded or Replicated input, checking that replicas agree."""
        decl = next((d for d in self.inputs if d.name == name and isinstance(d, Tensor)), None)
        if decl is None:
            raise KeyError(f"no tensor input named {name!r}")
        if isinstance(decl.layout, PerRank):
            raise ValueError(f"input {name} is PerRank: there is no global tensor; use [x[{name!r}] for x in inputs]")
        blocks: dict[int, torch.Tensor] = {}
        for rank, args in enumerate(inputs):
            index = decl.layout.block_index(self.layout, rank) if isinstance(decl.layout, Sharded) else 0
            if index in blocks:
                if not same_values(blocks[index], args[name]):
                    raise AssertionError(f"input {name}: replicas of block {index} differ (rank {rank})")
            else:
                blocks[index] = args[name]
        if isinstance(decl.layout, Replicated):
            return blocks[0]
        return torch.cat([blocks[i] for i in range(len(blocks))], dim=decl.layout.axis)

    def distribute(self, value: torch.Tensor, output: str) -> list[torch.Tensor]:
        """One copy or block per rank of a global output, by the output's declared layout."""
        decl = next((d for d in self.outputs if d.name == output), None)
        if decl is None:
            raise KeyError(f"no output named {output!r}")
        if isinstance(decl.layout, PerRank):
            raise ValueError(f"output {output} is PerRank: build its per-rank list in the golden directly")
        copies = self._blocks(value, decl.layout)
        if isinstance(decl.only_on, OnRanks):  # None off its ranks (a Scalar's rank is known only per call)
            return [c if decl.only_on.holds(r, self.sizes, self.layout) else None for r, c in enumerate(copies)]
        return copies

    def update(self, inputs: list[dict[str, Any]], name: str, value: torch.Tensor) -> None:
        """Write a global value of an input updated in place (InPlace) into every rank's copy or block of it,
        as the reference leaves them: the golden's side of state updated in place."""
        decl = next((d for d in self.inputs if d.name == name and isinstance(d, Tensor)), None)
        if decl is None or not any(o.inplace and o.name == name for o in self.outputs):
            raise KeyError(f"no input named {name!r} is updated in place (declare InPlace({name!r}))")
        if isinstance(decl.layout, PerRank):
            raise ValueError(f"input {name} is PerRank: update inputs[rank][{name!r}] in the golden directly")
        for args, block in zip(inputs, self._blocks(value, decl.layout)):
            args[name].copy_(block)

    def _blocks(self, value: torch.Tensor, layout: Replicated | Sharded) -> list[torch.Tensor]:
        """One copy (Replicated) or block (Sharded) of a global value per rank."""
        if isinstance(layout, Replicated):
            return [value.clone() for _ in range(self.world_size)]
        chunks = value.chunk(layout.blocks(self.layout), dim=layout.axis)
        return [chunks[layout.block_index(self.layout, r)].clone() for r in range(self.world_size)]
