"""PKB compatibility, declared per task: how ParallelKernelBench (PKB) calls its `solution` for the problem this
task is modelled on, and how what PKB's `solution` returns becomes this task's outputs (docs/pkb_compat.md).

A PKB-format file (PKB's signature, PKB's outputs, PKB's `utils.*` helpers) is judged unchanged: the judge wraps
its `solution` in the rank with an adapter built from this declaration (pkb_env/compat/adapter.py, trusted code
of pkb_env), which maps this task's arguments to PKB's call and PKB's result back. A spec declares it beside
`SPEC`, as a module-level `PKB`, read by `pkb_env.task.load_task` into `TaskSpec.pkb`:

    PKB = Pkb("allgather_gemm_AT", aliases=("gemm_allgather_AT",),
              params=(Arg("A_local", "A_t", to="transpose"), Arg("B")))

Parameters, in PKB's order (what PKB's harness passes positionally):
    Arg(name, input=None, to=None)   this task's input `input` (default: the same name); `to` converts it:
                                     "list" (an int64 tensor as a Python list), "transpose" (a 2-D tensor's
                                     transpose, a view), "clone" (a copy PKB may write to: PKB's reference
                                     mutates it), "size" (torch.Size of an int64 tensor's values), "item" (a
                                     one-element tensor as a Python number), or a dtype name (a cast)
    Harness(name, value, why)        PKB's harness value for a parameter pkb-env dropped; `Sizes(...)` for
                                     values that are sizes of the call ("W * N"), evaluated per call
    Listed(name, inputs)             several of this task's tensor inputs as one Python list
    Computed(name, fn, text)         anything else: fn(call: PkbCall) -> the value, `text` says what it is

Returns, one per value of the tuple PKB returns (one entry: PKB returns that value alone):
    Ret(target, to=None, fn=None, text="")   `target` is this task's output of that name, or an input it
                                     updates in place (the value is copied into the argument); `to` as for
                                     Arg ("fields": a 1-D tensor to the dict output's fields, in order; a dtype
                                     name: a cast); `fn(value, call)` for anything else
    Ret(None, why=...)               a value PKB returns that this task does not check (28's torch.Size)
Outputs declared `only_on` are None on the other ranks whatever PKB returns there (PKB returns a tensor on every
rank): no declaration needed.

Where pkb-env computes a different function on purpose, `differs` says how, and a wrong verdict names it
("PKB's semantics differ here: ..."); `variant` names the sibling spec that states PKB's problem as PKB states
it (tasks/<name>/pkb/), which `--pkb` judges such a file on; `unmapped` says why no mapping onto this task's
own statement exists (only the variant can judge a PKB file then; without one, no statement does, and the judge
says so instead of running the file: judge/pkb.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

from pkb_env.contract.expr import Expr, Size, as_expr

CONVERSIONS = ("list", "transpose", "clone", "size", "item", "fields")


@dataclass(frozen=True)
class PkbCall:
    """What a `Computed` parameter or a `Ret.fn` reads: this call's arguments by the task's input names, the
    sizes (the preset's dims, W, the mesh's dimensions), this rank and the world size."""

    values: Mapping[str, Any]
    sizes: Mapping[str, float]
    rank: int
    world_size: int


@dataclass(frozen=True)
class Sizes:
    """A PKB harness value made of sizes of the call: `Sizes("H", "W * X")` is the tuple (H, W*X) at the
    call's sizes, `Sizes("W * N", single=True)` the int W*N."""

    exprs: tuple[Expr, ...]
    single: bool = False

    def __init__(self, *exprs: Size, single: bool = False):
        object.__setattr__(self, "exprs", tuple(as_expr(e) for e in exprs))
        object.__setattr__(self, "single", single)
        if single and len(self.exprs) != 1:
            raise ValueError("Sizes(..., single=True) takes exactly one expression")

    def value(self, sizes: Mapping[str, float]) -> int | tuple[int, ...]:
        values = tuple(e.integer(sizes) for e in self.exprs)
        return values[0] if self.single else values

    def __str__(self) -> str:
        text = ", ".join(map(str, self.exprs))
        return text if self.single else f"({text})"


@dataclass(frozen=True)
class Arg:
    name: str
    input: str | None = None
    to: str | None = None

    @property
    def source(self) -> str:
        return self.input or self.name

    def describe(self) -> str:
        conversion = f" ({self.to})" if self.to else ""
        return f"{self.name} = {self.source}{conversion}" if (self.input or self.to) else self.name


@dataclass(frozen=True)
class Harness:
    name: str
    value: Any
    why: str = ""

    def describe(self) -> str:
        return f"{self.name} = {self.value if isinstance(self.value, Sizes) else repr(self.value)} (PKB's harness)"


@dataclass(frozen=True)
class Listed:
    name: str
    inputs: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.name} = [{', '.join(self.inputs)}]"


@dataclass(frozen=True)
class Computed:
    name: str
    fn: Callable[[PkbCall], Any]
    text: str

    def describe(self) -> str:
        return f"{self.name} = {self.text}"


Param = Union[Arg, Harness, Listed, Computed]


@dataclass(frozen=True)
class Ret:
    target: str | None
    to: str | None = None
    fn: Callable[[Any, PkbCall], Any] | None = None
    text: str = ""
    why: str = ""

    def describe(self) -> str:
        if self.target is None:
            return f"not checked ({self.why})"
        how = self.text or self.to
        return f"{self.target}" + (f" ({how})" if how else "")


@dataclass(frozen=True)
class Pkb:
    """The mapping of one task from PKB's problem (the module docstring)."""

    name: str                                   # PKB's file stem without its number: "allgather_gemm_AT"
    params: tuple[Param, ...] | None = None     # PKB's parameters in order; None: this task's inputs as they are
    returns: tuple[Ret, ...] | None = None      # PKB's returned values; None: what this task returns
    aliases: tuple[str, ...] = ()               # the problem's names in PKB's older numbering (its published corpus)
    differs: str = ""                           # how pkb-env's function departs from PKB's on purpose
    variant: str | None = None                  # the sibling spec stating PKB's problem ("pkb": tasks/<name>/pkb/)
    unmapped: str = ""                          # why a PKB file cannot run on this task's own statement
    needs: str = ""                             # what PKB's own reference needs that CPU ranks lack (CUDA, Triton)

    def __post_init__(self) -> None:
        where = f"Pkb({self.name!r})"
        for param in self.params or ():
            if isinstance(param, Arg) and param.to is not None and param.to not in CONVERSIONS[:-1] \
                    and not _is_dtype(param.to):
                raise ValueError(f"{where}: Arg {param.name}: unknown conversion {param.to!r}; use one of "
                                 f"{', '.join(CONVERSIONS[:-1])} or a dtype name")
        for ret in self.returns or ():
            if ret.target is None and not ret.why:
                raise ValueError(f"{where}: a returned value left unchecked (Ret(None)) needs why=")
            if ret.to is not None and ret.to != "fields" and not _is_dtype(ret.to):
                raise ValueError(f"{where}: Ret {ret.target}: unknown conversion {ret.to!r}; use 'fields' or a "
                                 f"dtype name")
        if self.unmapped and not self.differs:
            raise ValueError(f"{where}: unmapped= says no mapping onto this task exists; say how the functions "
                             f"differ (differs=)")
        names = [p.name for p in self.params or ()]
        if len(set(names)) != len(names):
            raise ValueError(f"{where}: PKB's parameter names must be unique")

    def parameters(self, task_parameters: Sequence[str]) -> list[str] | None:
        """PKB's positional parameter names (what the screen holds a PKB file's `solution` to); None where the task
        maps no PKB call (`unmapped`: PKB's signature is not declared, so none is checked)."""
        if self.unmapped and self.params is None:
            return None
        return list(task_parameters) if self.params is None else [p.name for p in self.params]

    def check(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], where: str) -> None:
        """Every input and output named exists in the task (load_task calls this; ValueError naming the fix)."""
        for param in self.params or ():
            sources = (param.source,) if isinstance(param, Arg) else param.inputs if isinstance(param, Listed) else ()
            for name in sources:
                if name not in inputs:
                    raise ValueError(f"{where}: PKB parameter {param.name} reads input {name!r}, which the task "
                                     f"does not declare (inputs: {', '.join(inputs)})")
        for ret in self.returns or ():
            if ret.target is not None and ret.target not in outputs:
                raise ValueError(f"{where}: PKB's returned value maps to {ret.target!r}, which is not an output "
                                 f"of the task (outputs: {', '.join(outputs)})")

    def describe(self, task_parameters: Sequence[str]) -> list[str]:
        """The mapping in words, one line per part (docs, `pkb-env show --pkb`)."""
        lines = [f"PKB's call: solution({', '.join(self.parameters(task_parameters) or ['...'])})"]
        if self.params is not None:
            lines.append("  from this task's inputs: " + "; ".join(p.describe() for p in self.params))
        if self.returns is not None:
            lines.append("  PKB's returned values: " + "; ".join(r.describe() for r in self.returns))
        if self.differs:
            lines.append(f"  PKB's semantics differ here: {self.differs}")
        if self.unmapped:
            lines.append(f"  no mapping onto this task: {self.unmapped}")
        if self.variant:
            lines.append(f"  PKB's problem as PKB states it: the variant {self.variant!r}")
        return lines


def _is_dtype(name: str) -> bool:
    from pkb_env.contract.io import DTYPES

    return name in DTYPES


PKB_TOLERANCE_TEXT = ("PKB's rule: torch.allclose(got.float(), expected.float(), atol=1e-2, rtol=1e-2) on every "
                      "floating output (PKB's defaults since its commit d4e0845)")
