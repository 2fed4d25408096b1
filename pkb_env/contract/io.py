"""Declarations of a task's inputs and outputs, like Gymnasium spaces: name, shape, dtype, distribution, layout.

One declaration per argument of `solution(...)`, in order, and one per output. Every consumer reads them:
the input maker, the prompt's input and output sections, the comparison rules, the shape checks of the
golden test and the byte counts of the cost model. Nothing about inputs is written twice.

Layouts say how a tensor is spread over the ranks of the task's mesh (pkb_env/contract/mesh.py):
* `Replicated()`: the same values on every rank.
* `Sharded(axis, over=...)`: rank holds one block along `axis` of a GLOBAL tensor whose shape is the
  declared shape; blocks go to the coordinates of the `over` mesh dims (default: all of them, i.e. rank
  order), and ranks that differ only in other dims hold the same block. The local shape divides `axis`
  by the number of blocks, exactly (`K / W` must divide).
* `PerRank(over=...)`: independent values per coordinate of `over` (default: every rank its own),
  replicated over the other dims. The declared shape is the local shape.
Replicated and sharded tensors are drawn per block from a seed that only the ranks holding that block
receive, so a rank can make its own block and never a peer's (docs/task_contract.md, "Seeds").
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

import torch

from pkb_env.contract.distributions import Distribution, FromInputs, Integers, Normal, dtype_kind
from pkb_env.contract.expr import Expr, Size, as_expr, show
from pkb_env.contract.mesh import GroupDims, MeshLayout
from pkb_env.contract.sparse import Sparse
from pkb_env.contract.tolerance import Rule

DTYPES: Mapping[str, torch.dtype] = {
    "float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "complex64": torch.complex64, "complex128": torch.complex128,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
TASK_DTYPE = "task"
"""A tensor whose dtype is the trial's (the preset's, or the one the user picks among the task's dtypes)."""


def resolve_dtype(name: str, task_dtype: str) -> torch.dtype:
    return DTYPES[task_dtype if name == TASK_DTYPE else name]


def _check_dtype(name: str, owner: str) -> None:
    if name != TASK_DTYPE and name not in DTYPES:
        raise ValueError(f"{owner}: unknown dtype {name!r}; use 'task' or one of {', '.join(DTYPES)}")


# -- layouts ------------------------------------------------------------------------------------------

def mesh_dims(over: Union[str, tuple[str, ...], None]) -> tuple[str, ...]:
    """The mesh dims a layout's `over` names (a name or a tuple of names; () for None)."""
    return (over,) if isinstance(over, str) else tuple(over or ())


@dataclass(frozen=True)
class Replicated:
    def scope(self, layout: MeshLayout) -> tuple[str, ...]:
        return ()

    def describe(self, layout: MeshLayout) -> str:
        return "the same on every rank"


@dataclass(frozen=True)
class Sharded:
    axis: int
    over: Union[str, tuple[str, ...], None] = None

    def scope(self, layout: MeshLayout) -> tuple[str, ...]:
        return mesh_dims(self.over) or tuple(layout.names)

    def blocks(self, layout: MeshLayout) -> int:
        n = 1
        for name in self.scope(layout):
            n *= layout.size(name)
        return n

    def block_index(self, layout: MeshLayout, rank: int) -> int:
        """Which block rank holds: its coordinates in the `over` dims, flattened in mesh order."""
        coords, index = layout.coords(rank), 0
        for name in layout.names:
            if name in self.scope(layout):
                index = index * layout.size(name) + coords[name]
        return index

    def describe(self, layout: MeshLayout) -> str:
        scope = self.scope(layout)
        if scope == layout.names and len(scope) == 1:
            who = "rank r holds block r"
        else:
            who = f"block index {' and '.join(f'{n}_rank' for n in scope)}"
        rest = [n for n in layout.names if n not in scope]
        text = f"{who} along dim {self.axis} of the global tensor"
        return text + (f", the same on ranks that differ only in {', '.join(rest)}" if rest else "")


@dataclass(frozen=True)
class PerRank:
    over: Union[str, tuple[str, ...], None] = None

    def scope(self, layout: MeshLayout) -> tuple[str, ...]:
        return mesh_dims(self.over) or tuple(layout.names)

    def describe(self, layout: MeshLayout) -> str:
        scope = self.scope(layout)
        if scope == layout.names:
            return "different on every rank"
        return f"different per {', '.join(scope)} coordinate, the same across {', '.join(n for n in layout.names if n not in scope)}"


Layout = Union[Replicated, Sharded, PerRank]


# -- inputs -------------------------------------------------------------------------------------------

def _shape(shape: tuple[Size, ...], owner: str) -> tuple[Expr, ...]:
    if not isinstance(shape, tuple):
        raise ValueError(f"{owner}: shape must be a tuple of sizes, e.g. ('M', 'K / W'), got {shape!r}")
    return tuple(as_expr(s) for s in shape)


@dataclass(frozen=True)
class Tensor:
    """A tensor argument. For `Sharded` layouts `shape` is the GLOBAL shape; otherwise the per-rank shape."""

    name: str
    shape: tuple[Size, ...]
    dtype: str = TASK_DTYPE
    dist: Distribution = field(default_factory=Normal)
    layout: Layout = field(default_factory=PerRank)
    doc: str = ""
    sparse: Sparse | None = None      # contract v3: a sparse COO/CSR input (sparse.py); `dist` draws its values

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, f"input {self.name}"))
        _check_dtype(self.dtype, f"input {self.name}")
        if self.sparse is not None:
            if not isinstance(self.sparse, Sparse):
                raise TypeError(f"input {self.name}: sparse= takes a Sparse(format, nnz= or density=)")
            if not self.shape or (self.sparse.format == "csr" and len(self.shape) != 2):
                raise ValueError(f"input {self.name}: a sparse input has at least one dimension, and a CSR one "
                                 f"exactly two; use 'coo' for {len(self.shape)}-D")
            if isinstance(self.dist, FromInputs):
                raise ValueError(f"input {self.name}: a sparse input is drawn (its values from `dist`), not computed")
        if self.dtype != TASK_DTYPE and dtype_kind(DTYPES[self.dtype]) not in self.dist.kinds:
            raise ValueError(f"input {self.name}: {type(self.dist).__name__} cannot fill a {self.dtype} tensor")
        if isinstance(self.layout, Sharded) and not -len(self.shape) <= self.layout.axis < len(self.shape):
            raise ValueError(f"input {self.name}: shard axis {self.layout.axis} is outside its "
                             f"{len(self.shape)}-d shape")

    def local_shape(self, env: Mapping[str, float], layout: MeshLayout) -> tuple[int, ...]:
        return local_shape(self.shape, self.layout, env, layout)


@dataclass(frozen=True)
class Scalar:
    """A Python number drawn per trial (a root rank, a step counter); replicated unless said otherwise."""

    name: str
    dist: Distribution
    layout: Layout = field(default_factory=Replicated)
    doc: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.layout, Sharded):
            raise ValueError(f"input {self.name}: a Scalar cannot be sharded; use Replicated or PerRank")


@dataclass(frozen=True)
class Const:
    """A fixed argument: a literal (`1e-5`, `True`, `None`, `"quintic"`), a preset dim (`dim="H"`), or the
    trial's task dtype as a torch.dtype (`task_dtype=True`), for a reference whose tensor inputs do not
    imply the dtype of its output (a dequantisation from fp8)."""

    name: str
    value: Any = None
    dim: Size | None = None
    doc: str = ""
    task_dtype: bool = False

    def __post_init__(self) -> None:
        if self.dim is not None:
            object.__setattr__(self, "dim", as_expr(self.dim))
        if self.task_dtype and (self.dim is not None or self.value is not None):
            raise ValueError(f"input {self.name}: a Const is a literal value, a dim, or the task dtype; "
                             f"give only one of value=, dim= and task_dtype=True")

    def resolve(self, env: Mapping[str, float], dtype: str | None = None) -> Any:
        """The argument's value; `dtype` (the trial's task dtype name) is needed for `task_dtype=True`."""
        if self.task_dtype:
            if dtype is None:
                raise ValueError(f"input {self.name} is the task dtype: resolve it with the trial's dtype name")
            return DTYPES[dtype]
        return self.dim.integer(env) if self.dim is not None else self.value


@dataclass(frozen=True)
class Group:
    """A process group argument: this rank's group along mesh dimension `dim`, or over several dimensions
    (`dim=("dp", "ep")`: the ranks that share every other coordinate), built by the judge at load."""

    name: str
    dim: GroupDims
    doc: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.dim, (list, tuple)):
            if not self.dim or not all(isinstance(d, str) for d in self.dim) or len(set(self.dim)) != len(self.dim):
                raise TypeError(f"input {self.name}: a group spans one mesh dimension or a tuple of distinct ones, "
                                 f"got {self.dim!r}")
            object.__setattr__(self, "dim", tuple(self.dim) if len(self.dim) > 1 else self.dim[0])
        elif not isinstance(self.dim, str):
            raise TypeError(f"input {self.name}: dim must name a mesh dimension or a tuple of them, got {self.dim!r}")

    @property
    def dims(self) -> tuple[str, ...]:
        return (self.dim,) if isinstance(self.dim, str) else self.dim


@dataclass(frozen=True)
class Length:
    """A size drawn per call that input shapes may name: a ragged dimension (sequence lengths that differ
    by rank, token counts per expert). Not an argument of `solution`: the tensors it sizes carry it.

    Uniform integers in [low, high) (bounds are expressions over the preset's dims, W and the mesh), drawn
    from the seed of `layout`'s scope: by default every rank its own, so a rank learns a peer's length only
    by asking. Wherever no call's values exist (cost models, world-size checks, byte counts, tolerances)
    the length is `low`, the smallest it can be, so a cost model stays a lower bound.
    """

    name: str
    low: Size
    high: Size
    layout: Layout = field(default_factory=PerRank)
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name == "W":
            raise ValueError(f"length {self.name!r}: the name must be an identifier other than W (shapes name it)")
        object.__setattr__(self, "low", as_expr(self.low))
        object.__setattr__(self, "high", as_expr(self.high))
        if isinstance(self.layout, Sharded):
            raise ValueError(f"length {self.name}: a Length cannot be sharded; use PerRank or Replicated")

    @property
    def dist(self) -> Integers:
        return Integers(self.low, self.high)

    def describe(self, env: Mapping[str, float], layout: MeshLayout) -> str:
        low, high = self.low.integer(env), self.high.integer(env)
        doc = f" -- {self.doc}" if self.doc else ""
        return (f"{self.name}: an integer in [{show(self.low)}, {show(self.high)}) = [{low}, {high}), drawn per "
                f"call; {self.layout.describe(layout)}{doc}")


Input = Union[Tensor, Scalar, Const, Group]


# -- outputs ------------------------------------------------------------------------------------------

COMPARES = ("close", "exact", "unordered")


@dataclass(frozen=True)
class Output:
    """An output. `shape=None` means its length depends on the data (compared by content, see `compare`).

    compare: "close" (floats at the task's tolerance; integers and booleans exactly), "exact" (bit-exact
    whatever the dtype: data movement), "unordered" (rows along dim 0 may come in any order: both sides
    are sorted before an exact comparison; for integer and boolean outputs).
    only_on: the name of a Scalar input holding a rank; the output exists on that rank, None elsewhere.
    tolerance: this output's own rule where it differs from the task's.
    """

    name: str
    shape: tuple[Size, ...] | None
    dtype: str = TASK_DTYPE
    layout: Layout = field(default_factory=PerRank)
    compare: str = "close"
    only_on: str | None = None
    tolerance: Rule | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.shape is not None:
            object.__setattr__(self, "shape", _shape(self.shape, f"output {self.name}"))
        _check_dtype(self.dtype, f"output {self.name}")
        if self.compare not in COMPARES:
            raise ValueError(f"output {self.name}: compare must be one of {COMPARES}, got {self.compare!r}")
        if self.compare == "unordered" and (self.dtype == TASK_DTYPE or DTYPES[self.dtype].is_floating_point
                                            or DTYPES[self.dtype].is_complex):
            raise ValueError(f"output {self.name}: unordered comparison sorts rows, which is only stable for "
                             f"integer and boolean outputs")

    def local_shape(self, env: Mapping[str, float], layout: MeshLayout) -> tuple[int, ...] | None:
        return None if self.shape is None else local_shape(self.shape, self.layout, env, layout)


def local_shape(shape: tuple[Expr, ...], placement: Layout, env: Mapping[str, float],
                layout: MeshLayout) -> tuple[int, ...]:
    dims = [s.integer(env) for s in shape]
    if isinstance(placement, Sharded):
        axis = placement.axis % len(dims)
        blocks = placement.blocks(layout)
        if dims[axis] % blocks:
            raise ValueError(f"dim {axis} ({show(shape[axis])} = {dims[axis]}) does not split into {blocks} "
                             f"equal blocks")
        dims[axis] //= blocks
    return tuple(dims)


def show_shape(shape: tuple[Expr, ...], placement: Layout, layout: MeshLayout) -> str:
    """The local shape as text: `(M, K/W)` for a (M, K) tensor sharded along dim 1 over W ranks."""
    parts = [show(s) for s in shape]
    if isinstance(placement, Sharded):
        axis = placement.axis % len(parts)
        scope = placement.scope(layout)
        divisor = "W" if scope == layout.names else "*".join(scope)
        parts[axis] = _divide(shape[axis], divisor)
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _divide(size: Expr, divisor: str) -> str:
    """`size / divisor` as text, cancelling a factor equal to the divisor (`W * M` over W is `M`)."""
    tree = ast.parse(size.text, mode="eval").body
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Mult):
        for keep, drop in ((tree.left, tree.right), (tree.right, tree.left)):
            if ast.unparse(drop) == divisor:
                return ast.unparse(keep)
    inner = size.text
    return f"({inner})/{divisor}" if any(op in inner for op in "+-*/ ") else f"{inner}/{divisor}"
