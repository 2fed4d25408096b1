"""Distributions of a task's random inputs, declared as data and described in the prompt.

Every input of every task is random and drawn anew per trial from a secret seed (docs/task_contract.md):
constant fills and fixed patterns let a candidate hard-code outputs. A distribution draws a tensor of a
given shape on the generator's device and says in one line what it draws. Bounds may be size
expressions (`Integers(0, "V")`). A task with an exotic input (routing maps, sorted segment lengths)
declares it with `Custom`, which still receives only the seeded generator of the input's scope, so it
can make this rank's values and never a peer's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from pkb_env.contract.expr import Size, as_expr, show

Env = Mapping[str, float]


class Distribution:
    """Base class: `draw` values of `shape` and `dtype`; `describe` them for the prompt.

    `Custom` and `FromInputs` may name other tensor inputs their values depend on (`reads`); those are
    made first (every input has its own stream, so the order of making changes no value).
    """

    kinds: frozenset[str] = frozenset({"float"})   # which dtype kinds it can fill: float, int, bool

    def draw(self, gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype, env: Env) -> torch.Tensor:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def scalar(self, gen: torch.Generator, env: Env):
        """One Python value (for Scalar inputs such as a root rank)."""
        kind = "int" if "int" in self.kinds else "float"
        value = self.draw(gen, (), torch.int64 if kind == "int" else torch.float64, env)
        return int(value) if kind == "int" else float(value)


def _float(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.float32, device=gen.device)


@dataclass(frozen=True)
class Normal(Distribution):
    mean: float = 0.0
    std: float = 1.0

    def draw(self, gen, shape, dtype, env):
        if dtype.is_complex:  # both parts drawn, each with the given std
            parts = torch.randn((*shape, 2), generator=gen, device=gen.device, dtype=torch.float32)
            return torch.view_as_complex(parts * self.std + self.mean).to(dtype)
        out = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32)
        if self.std != 1.0:  # in place, and only where needed: timing draws hundreds of input sets per burst
            out.mul_(self.std)
        if self.mean != 0.0:
            out.add_(self.mean)
        return out.to(dtype)

    def describe(self) -> str:
        if (self.mean, self.std) == (0.0, 1.0):
            return "standard normal"
        return f"normal, mean {self.mean:g}, std {self.std:g}"


@dataclass(frozen=True)
class Uniform(Distribution):
    low: float = 0.0
    high: float = 1.0

    def draw(self, gen, shape, dtype, env):
        return _float(gen, shape).uniform_(self.low, self.high, generator=gen).to(dtype)

    def describe(self) -> str:
        return f"uniform in [{self.low:g}, {self.high:g})"


@dataclass(frozen=True)
class Positive(Distribution):
    """Log-normal: `scale * exp(N(0, 1) / 2)`, strictly positive with magnitudes spread over ~2 decades."""

    scale: float = 1.0

    def draw(self, gen, shape, dtype, env):
        out = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32)
        return (torch.exp(out * 0.5) * self.scale).to(dtype)

    def describe(self) -> str:
        return f"positive, {self.scale:g} * exp(N(0,1)/2)"


class Integers(Distribution):
    """Uniform integers in [low, high) (high exclusive, like torch.randint); bounds may be expressions."""

    kinds = frozenset({"int", "float"})

    def __init__(self, low: Size, high: Size):
        self.low, self.high = as_expr(low), as_expr(high)

    def draw(self, gen, shape, dtype, env):
        low, high = self.low.integer(env), self.high.integer(env)
        if high <= low:
            raise ValueError(f"Integers({self.low}, {self.high}) is empty at {low}..{high}")
        return torch.randint(low, high, shape, generator=gen, device=gen.device, dtype=torch.int64).to(dtype)

    def describe(self) -> str:
        return f"integers in [{show(self.low)}, {show(self.high)})"

    def __eq__(self, other):
        return isinstance(other, Integers) and (self.low, self.high) == (other.low, other.high)

    def __hash__(self):
        return hash((self.low, self.high))


@dataclass(frozen=True)
class Bernoulli(Distribution):
    p: float = 0.5
    kinds = frozenset({"bool", "int", "float"})

    def draw(self, gen, shape, dtype, env):
        return (_float(gen, shape).uniform_(generator=gen) < self.p).to(dtype)

    def describe(self) -> str:
        return f"Bernoulli({self.p:g})"


@dataclass(frozen=True)
class OneHot(Distribution):
    """Each row along the last axis is one-hot at a uniformly drawn class (the last dim counts classes)."""

    kinds = frozenset({"bool", "int", "float"})

    def draw(self, gen, shape, dtype, env):
        if not shape:
            raise ValueError("OneHot needs at least one axis (the classes)")
        index = torch.randint(0, shape[-1], shape[:-1], generator=gen, device=gen.device)
        return torch.nn.functional.one_hot(index, shape[-1]).to(dtype)

    def describe(self) -> str:
        return "one-hot rows along the last axis, class drawn uniformly"


@dataclass(frozen=True)
class Permutation(Distribution):
    """Each row along the last axis is a uniformly random permutation of 0..n-1."""

    kinds = frozenset({"int"})

    def draw(self, gen, shape, dtype, env):
        keys = _float(gen, shape).uniform_(generator=gen)
        return keys.argsort(dim=-1).to(dtype)

    def describe(self) -> str:
        return "a random permutation of 0..n-1 along the last axis"


@dataclass(frozen=True)
class UnitRows(Distribution):
    """Standard-normal rows scaled to unit L2 norm along the last axis (normalised embeddings)."""

    def draw(self, gen, shape, dtype, env):
        out = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32)
        return torch.nn.functional.normalize(out, dim=-1).to(dtype)

    def describe(self) -> str:
        return "rows of unit L2 norm along the last axis (normalised normals)"


@dataclass(frozen=True)
class Given:
    """What a `Custom` maker with `reads` sees besides its stream: this rank's values of the inputs it reads
    (as made, on the draw device), and where this rank's block starts in the global tensor (one offset per
    axis; zeros unless the input is sharded)."""

    values: Mapping[str, torch.Tensor]
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class Custom(Distribution):
    """A task's own maker: `fn(gen, shape, dtype, env) -> tensor`, described by `text` in the prompt.

    `fn` must draw only from `gen` (the seeded stream of this input's scope on this rank) and return a
    tensor of exactly `shape` and `dtype`; the judge checks both.

    With `reads` (random values conditioned on other inputs: logits whose target logit is raised so that
    it survives a top-k filter), `fn(gen, shape, dtype, env, given)` also receives a `Given`. TaskSpec
    checks that each input read varies over no mesh dimension this one does not, so replicas agree and a
    rank conditions only on values it holds.
    """

    fn: Callable[..., torch.Tensor]
    text: str
    kinds: frozenset[str] = frozenset({"float", "int", "bool"})
    reads: tuple[str, ...] = ()

    def draw(self, gen, shape, dtype, env, given: Given | None = None):
        if self.reads:
            if given is None:
                raise ValueError(f"{self.text!r} reads {self.reads}: draw it with their values (a Given)")
            return self.fn(gen, shape, dtype, env, given)
        return self.fn(gen, shape, dtype, env)

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class FromInputs(Distribution):
    """Values computed from this rank's other inputs, not drawn: `fn(values, shape, dtype, env)`, where
    `values` maps each name in `reads` to this rank's tensor (as drawn, before it moves to the rank's
    device, so every device computes the same values). For inputs that must agree with others: the
    statistics a forward pass saved for its backward (out, log-sum-exp) beside the activations.

    It holds no seed, so it reveals nothing the rank does not hold; the TaskSpec checks that `reads` are
    tensor inputs varying over no mesh dim this input does not (so replicas stay equal).
    """

    fn: Callable[[Mapping[str, torch.Tensor], tuple[int, ...], torch.dtype, Env], torch.Tensor]
    reads: tuple[str, ...]
    text: str
    kinds: frozenset[str] = frozenset({"float", "int", "bool"})

    def draw(self, gen, shape, dtype, env):
        raise TypeError(f"FromInputs ({self.text}) computes its values from {self.reads}: call compute()")

    def compute(self, values: Mapping[str, torch.Tensor], shape: tuple[int, ...], dtype: torch.dtype,
                env: Env) -> torch.Tensor:
        return self.fn(values, shape, dtype, env)

    def describe(self) -> str:
        return f"{self.text} (computed from this rank's {', '.join(self.reads)})"


def dtype_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_floating_point or dtype.is_complex:
        return "float"
    return "int"
