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
KINDS = ("tensor", "scalar", "none", "dict")
TASK_COMPLEX = "complex"
"""An output dtype: the complex type of the trial's dtype (complex64 for float32, complex128 for float64).

No complex type exists for bfloat16, and torch's complex32 (for float16) is experimental: no FFT on the
CPU, no `torch.equal`. A task with such an output takes float32 or float64 only; an FFT that reads 16-bit
inputs and returns fp32 spectra declares `dtype="complex64"` instead (docs/task_contract.md)."""
COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}


class OnRanks:
    """A set of ranks, for an output that exists only there (None elsewhere): the ranks whose mesh
    coordinates equal the given values, each a size expression. `OnRanks(dp=0)`: the ranks at coordinate 0
    of dp (one replica of a data-parallel group); `OnRanks(world="W - 1")`: the last rank of a flat mesh;
    `OnRanks(dp=0, tp=0)`: one rank of a dp x tp mesh."""

    def __init__(self, **coordinates: Size):
        if not coordinates:
            raise ValueError("OnRanks needs at least one coordinate, e.g. OnRanks(dp=0)")
        self.coordinates = tuple((name, as_expr(value)) for name, value in sorted(coordinates.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OnRanks) and other.coordinates == self.coordinates

    def __hash__(self) -> int:
        return hash(self.coordinates)

    def __repr__(self) -> str:
        return f"OnRanks({', '.join(f'{n}={str(v)!r}' for n, v in self.coordinates)})"

    def holds(self, rank: int, env: Mapping[str, float], layout: MeshLayout) -> bool:
        coords = layout.coords(rank)
        return all(coords[name] == value.integer(env) for name, value in self.coordinates)

    def describe(self) -> str:
        return "on the ranks with " + " and ".join(f"{n} = {show(v)}" for n, v in self.coordinates) + \
            " only, None on the others"


@dataclass(frozen=True)
class Output:
    """An output (docs/task_contract.md, "Outputs").

    kind: "tensor" (default); "scalar" (a Python number: float for floating dtypes, int for integer ones,
    bool for bool; a 0-dim tensor is a tensor of shape ()); "none" (always None: a slot of a tuple that
    the function fills with None); "dict" (`fields`: one Output per key, each compared by its own rule; a
    missing or extra key is a mismatch naming the key).
    shape: as for inputs (GLOBAL for `Sharded`); None for a variable-length tensor, which must declare
    `max_shape` (a bound per dim, checked in the rank before the output travels; compared by content).
    dtype: "task", a fixed name, or "complex" (the complex type of the task dtype, COMPLEX_OF).
    compare: "close" (floats at the tolerance; integers and booleans exactly), "exact" (bit-exact whatever
    the dtype: data movement), "unordered" (rows along dim 0 may come in any order: both sides are sorted
    before an exact comparison; for integer and boolean outputs; float rows use `order_by`).
    order_by: the name of an integer output whose rows (unique per rank) are this output's row ids: both
    sides are put in the order of their own ids, then compared by `compare` (floats at the tolerance).
    only_on: the name of a Scalar input holding a rank, or an `OnRanks` set; None on the other ranks.
    identical: ranks that hold the same block by the layout (every rank, for Replicated) must return
    bit-identical values, beside each being close to the reference (replicas of parameters).
    ties: how the statement breaks ties, in words shown in the prompt ("the lower index first").
    inplace: set by `InPlace`: the final value of the input of this name, compared after the call.
    tolerance: this output's own rule where it differs from the task's.
    """

    name: str
    shape: tuple[Size, ...] | None = None
    dtype: str = TASK_DTYPE
    layout: Layout = field(default_factory=PerRank)
    compare: str = "close"
    only_on: str | OnRanks | None = None
    tolerance: Rule | None = None
    doc: str = ""
    kind: str = "tensor"
    fields: tuple["Output", ...] = ()
    max_shape: tuple[Size, ...] | None = None
    order_by: str | None = None
    ties: str = ""
    identical: bool = False
    inplace: bool = False

    def __post_init__(self) -> None:
        where = f"output {self.name}"
        if self.fields and self.kind == "tensor":
            object.__setattr__(self, "kind", "dict")
        if self.kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.shape is not None:
            object.__setattr__(self, "shape", _shape(self.shape, where))
        if self.max_shape is not None:
            object.__setattr__(self, "max_shape", _shape(self.max_shape, f"{where}'s max_shape"))
        if self.dtype != TASK_COMPLEX:
            _check_dtype(self.dtype, where)
        if self.compare not in COMPARES:
            raise ValueError(f"{where}: compare must be one of {COMPARES}, got {self.compare!r}")
        self._check_kind(where)
        if self.compare == "unordered" and self._floating_or_task:
            raise ValueError(f"{where}: unordered comparison sorts rows, which is only stable for integer and boolean "
                             f"outputs; for float rows in any order declare order_by='<an integer id output>'")
        if self.order_by is not None and (self.compare == "unordered" or self.kind != "tensor"):
            raise ValueError(f"{where}: order_by puts a tensor's rows in the order of its ids, then compares them "
                             f"by compare='close' or 'exact'; it does not combine with compare='unordered'")
        unresolved = self.inplace and self.shape is None  # InPlace: the input's layout is filled in later
        if self.identical and not unresolved and (self.kind not in ("tensor", "scalar")
                                                  or isinstance(self.layout, PerRank) and self.layout.over is None):
            raise ValueError(f"{where}: identical=True needs a layout under which several ranks hold the same "
                             f"values (Replicated, Sharded(over=...), PerRank(over=...))")

    def _check_kind(self, where: str) -> None:
        if self.kind == "tensor":
            if self.shape is None and self.max_shape is None and not self.inplace:
                raise ValueError(f"{where}: declare its shape, or for a variable-length output its bound "
                                 f"max_shape=(...) (one size expression per dim)")
            if self.shape is not None and self.max_shape is not None:
                raise ValueError(f"{where}: declare shape (fixed) or max_shape (variable length), not both")
            return
        if self.max_shape is not None or self.order_by is not None or self.compare == "unordered":
            raise ValueError(f"{where}: max_shape, order_by and compare='unordered' apply to tensor outputs")
        if self.kind == "scalar":
            if self.shape not in (None, ()):
                raise ValueError(f"{where}: a scalar output has no shape (a 0-dim tensor is kind='tensor', "
                                 f"shape=())")
            if self.dtype == TASK_COMPLEX or self.dtype != TASK_DTYPE and DTYPES[self.dtype].is_complex:
                raise ValueError(f"{where}: a scalar output is a Python float, int or bool")
        elif self.kind == "none":
            if self.shape is not None or self.fields or self.identical:
                raise ValueError(f"{where}: a kind='none' output is always None; it takes no shape or fields")
        else:
            names = [f.name for f in self.fields]
            if not names or len(set(names)) != len(names):
                raise ValueError(f"{where}: a dict output declares its keys as fields=(Output(...), ...), "
                                 f"with unique names")
            if self.shape is not None:
                raise ValueError(f"{where}: a dict output has no shape; its fields have theirs")
            for sub in self.fields:
                if sub.only_on is not None or sub.inplace or sub.order_by is not None:
                    raise ValueError(f"{where}: field {sub.name} cannot declare only_on, inplace or order_by "
                                     f"(declare them on the dict output)")

    @property
    def _floating_or_task(self) -> bool:
        return self.dtype in (TASK_DTYPE, TASK_COMPLEX) or DTYPES[self.dtype].is_floating_point \
            or DTYPES[self.dtype].is_complex

    def resolve_dtype(self, task_dtype: str) -> torch.dtype:
        """The output's torch dtype at the trial's task dtype ("complex" follows COMPLEX_OF)."""
        if self.dtype == TASK_COMPLEX:
            if task_dtype not in COMPLEX_OF:
                raise ValueError(f"output {self.name}: no complex type matches task dtype {task_dtype} (torch has "
                                 f"no complex bfloat16 and complex32 is experimental); the task takes "
                                 f"{', '.join(COMPLEX_OF)} only")
            return DTYPES[COMPLEX_OF[task_dtype]]
        return resolve_dtype(self.dtype, task_dtype)

    def local_shape(self, env: Mapping[str, float], layout: MeshLayout) -> tuple[int, ...] | None:
        return None if self.shape is None else local_shape(self.shape, self.layout, env, layout)

    def bound(self, env: Mapping[str, float], layout: MeshLayout) -> tuple[int, ...] | None:
        """The largest local shape a variable-length output may have (max_shape, per dim); None if fixed."""
        return None if self.max_shape is None else local_shape(self.max_shape, self.layout, env, layout)

    def holds(self, rank: int, values: Mapping[str, Any], env: Mapping[str, float], layout: MeshLayout) -> bool:
        """Whether the output exists on `rank` (only_on), given this call's arguments by name."""
        if self.only_on is None:
            return True
        if isinstance(self.only_on, OnRanks):
            return self.only_on.holds(rank, env, layout)
        return values[self.only_on] == rank


def InPlace(name: str, compare: str = "close", tolerance: Rule | None = None, identical: bool = False,
            doc: str = "") -> Output:
    """State updated in place: the tensor input `name` is also an output, compared after the call like one
    (its shape, dtype and layout are the input's; TaskSpec fills them in). Optimizer moments, ZeRO shards,
    gradients scaled by clip-grad-norm. Every other input must still be left unchanged, and every call gets
    fresh inputs, so nothing carries from one call to the next."""
    return Output(name, compare=compare, tolerance=tolerance, identical=identical, doc=doc, inplace=True)


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
