"""Tolerances: how far a correct answer may lie from the reference's, as a rule of dtype AND problem size.

Two correct algorithms differ by rounding only, and rounding grows with the work: a K-term dot product
carries about K times the unit roundoff of its magnitude in the worst case, a sum over W ranks rounds W-1
partial sums, attention averages S values. A fixed per-dtype tolerance is either too tight for large
problems (a correct GEMM fails at K=8192) or too loose for small ones (a wrong one passes at K=64). So a
task declares where its rounding comes from, as data, and the rule turns that into `atol` and `rtol`
for the dtype and sizes at hand, with a reason the prompt shows.

The model (u = unit roundoff of the precision, 2^-8 for bf16, 2^-11 fp16, 2^-24 fp32):
* `Sum(terms=n, magnitude=s, accumulate=...)`: n terms of RMS s summed with a rounding after each
  addition, in the task dtype (`"dtype"`: a collective reducing bf16 buffers) or in fp32 (`"float32"`:
  tensor-core and CPU GEMMs accumulate there). The partial sums have RMS up to s*sqrt(n); n-1 roundings
  of at most u times that add up to less than u*s*n^1.5 (Higham's gamma_n bound, with the magnitude of
  random partial sums rather than the sum of absolute values). atol += u_acc * s * n^1.5.
* `Rounded(terms=n, magnitude=s)`: n values of RMS s each rounded once to the task dtype before they are
  combined (partial GEMM results stored in bf16 before an all-reduce): each error is below u times its
  value; their sum stays below u*s*(n + 5*sqrt(n)) for all but a few-in-a-million elements.
  atol += u * s * (n + 5 * sqrt(n)).
* `Propagated(terms=n, magnitude=s)`: n values of RMS s, each rounded once to the task dtype, that reach
  an output element through a dot product with independent unit-RMS weights (an MLP's activations
  stored in the dtype before the second GEMM). The rounding errors are independent and meet weights of
  random sign, so they add in quadrature to RMS u*s*sqrt(n/3); atol += 4*u*s*sqrt(n), about seven
  standard deviations. (`Rounded` is the coherent worst case, n*u*s, too loose once n is in the
  thousands: it would pass a result missing a rank's share.)
* `Relative(terms=n, accumulate=...)`: errors that scale with each value itself rather than with an RMS:
  n roundings in `accumulate` precision carried multiplicatively into the output (a softmax's exp of a
  rounded score, products of rounded factors), so the largest values carry the largest errors.
  rtol += u_acc * n, no atol.
* Every float rule keeps rtol >= 4u of the OUTPUT's dtype: both algorithms round the final value to it
  once (one ulp each, and an ulp is at most 2u relative). An fp32 loss computed from bf16 logits gets
  the fp32 rtol; the atol terms keep the task dtype (or the precision they name).
* `Ulps(n, dtype)` for outputs stored in a fixed precision that is not the task's (fp8 quantised values,
  fp32 scales): two correct algorithms may land up to n representable steps apart (a rounding
  midpoint crossed by the last bit of the input to the rounding). atol = n subnormal steps of that
  dtype, rtol = n * 2u (a step is at most 2u of the value).
* `Fft(points=N, magnitude=s)`: a Fourier transform of N points (complex outputs, both parts): log2(N)
  butterfly stages each round once; atol += 4*u*s*log2(N).
* `Fixed({dtype: Tolerance})` for error that has no such model (iterative methods), with the measured
  reason; `Exact(reason)` for data movement, integer and boolean outputs.
Rules add: `Sum(...) + Rounded(...)` sums the atols and keeps the larger rtol.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch

from pkb_env.contract.expr import Size, as_expr, show


@dataclass(frozen=True)
class Tolerance:
    """Element-wise closeness `|got - expected| <= atol + rtol * |expected|`, with the reason for the values."""

    atol: float
    rtol: float
    reason: str

    @property
    def exact(self) -> bool:
        return self.atol == 0.0 and self.rtol == 0.0


@dataclass(frozen=True)
class Check:
    """How one output is compared: its tolerance; whether rows (dim 0) may come in any order (`unordered`:
    sorted; `order_by`: the path of the integer output whose rows give both sides' order); whether ranks
    holding the same block must agree bit for bit (`identical`)."""

    tolerance: Tolerance
    unordered: bool = False
    order_by: str | None = None
    identical: bool = False

    @property
    def order(self) -> bool | str:
        """How the ranks' fingerprints order rows (the wire's Rule): False, True (sorted) or the key's path."""
        return self.order_by if self.order_by is not None else self.unordered


EXACT = Tolerance(0.0, 0.0, "pure data movement: every element must arrive bit-exact")

UNIT_ROUNDOFF: Mapping[torch.dtype, float] = {
    torch.float64: 2.0 ** -53, torch.complex128: 2.0 ** -53,
    torch.float32: 2.0 ** -24, torch.complex64: 2.0 ** -24,
    torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8,
    torch.float8_e4m3fn: 2.0 ** -4, torch.float8_e5m2: 2.0 ** -3,
}
"""Half an ulp at 1.0: the largest relative error of one round-to-nearest in each precision."""

_ROUNDOFF_TEXT = {2.0 ** -53: "2^-53", 2.0 ** -24: "2^-24", 2.0 ** -11: "2^-11", 2.0 ** -8: "2^-8",
                  2.0 ** -4: "2^-4", 2.0 ** -3: "2^-3"}


def unit_roundoff(dtype: torch.dtype) -> float:
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff for {dtype}: integer and boolean outputs are compared exactly")
    return UNIT_ROUNDOFF[dtype]


class Rule:
    """A tolerance as a function of the task dtype and the sizes (dims, W and mesh sizes).

    `output_dtype` is the dtype of the output being compared when it is not the task dtype (an fp32 loss
    of bf16 logits): the final rounding, and so the rtol, is in it. None means the task dtype.
    """

    def __call__(self, dtype: torch.dtype, env: Mapping[str, float],
                 output_dtype: torch.dtype | None = None) -> Tolerance:
        raise NotImplementedError

    def describe(self) -> str:
        """The rule in words, without numbers (docs and the task listing)."""
        raise NotImplementedError

    def __add__(self, other: "Rule") -> "Rule":
        return Combined(_parts(self) + _parts(other))


def _parts(rule: Rule) -> tuple[Rule, ...]:
    return rule.parts if isinstance(rule, Combined) else (rule,)


@dataclass(frozen=True)
class Exact(Rule):
    reason: str = EXACT.reason

    def __call__(self, dtype, env, output_dtype=None):
        return Tolerance(0.0, 0.0, self.reason)

    def describe(self) -> str:
        return f"exact ({self.reason})"


class _Float(Rule):
    """A rule contributing an atol term; every float rule keeps rtol = 4u of the task dtype."""

    def atol(self, dtype: torch.dtype, env: Mapping[str, float]) -> tuple[float, str]:
        raise NotImplementedError

    def rtol(self, dtype: torch.dtype, env: Mapping[str, float]) -> float:
        """What this rule adds to the 4u every float rule keeps (Relative's errors; none for the others)."""
        return 0.0

    def __call__(self, dtype, env, output_dtype=None):
        return Combined((self,))(dtype, env, output_dtype)


class Sum(_Float):
    """`terms` values of RMS `magnitude` summed with a rounding per addition in `accumulate` precision."""

    def __init__(self, terms: Size, magnitude: Size = 1, accumulate: str = "dtype", what: str = ""):
        if accumulate not in ("dtype", "float32"):
            raise ValueError(f"Sum(accumulate=...) must be 'dtype' or 'float32', got {accumulate!r}")
        self.terms, self.magnitude, self.accumulate, self.what = as_expr(terms), as_expr(magnitude), accumulate, what

    def atol(self, dtype, env):
        wider = unit_roundoff(dtype) < unit_roundoff(torch.float32)  # fp64 tasks accumulate in fp64
        acc = dtype if self.accumulate == "dtype" or wider else torch.float32
        n, s = self.terms.real(env), self.magnitude.real(env)
        value = unit_roundoff(acc) * s * n ** 1.5
        return value, (f"{self.what or 'sums'}: {n:g} terms of RMS {s:.3g} accumulated in {_name(acc)} "
                       f"-> u*s*n^1.5 = {value:.3g}")

    def describe(self) -> str:
        return (f"{self.what or 'sum'} of {show(self.terms)} terms of RMS {show(self.magnitude)}, "
                f"accumulated in {'the dtype' if self.accumulate == 'dtype' else 'fp32'}")


class Rounded(_Float):
    """`terms` values of RMS `magnitude`, each rounded once to the task dtype, then combined."""

    def __init__(self, terms: Size, magnitude: Size = 1, what: str = ""):
        self.terms, self.magnitude, self.what = as_expr(terms), as_expr(magnitude), what

    def atol(self, dtype, env):
        u = unit_roundoff(dtype)
        n, s = self.terms.real(env), self.magnitude.real(env)
        value = u * s * (n + 5 * math.sqrt(n))
        return value, (f"{self.what or 'stored intermediates'}: {n:g} values of RMS {s:.3g} rounded to "
                       f"{_name(dtype)} -> u*s*(n+5*sqrt(n)) = {value:.3g}")

    def describe(self) -> str:
        return f"{self.what or 'intermediates'}: {show(self.terms)} values of RMS {show(self.magnitude)} rounded once"


class Propagated(_Float):
    """`terms` values of RMS `magnitude`, each rounded once to the task dtype, combined with independent
    random-sign weights of RMS 1 (an operand of a later GEMM): the errors add in quadrature."""

    def __init__(self, terms: Size, magnitude: Size = 1, what: str = ""):
        self.terms, self.magnitude, self.what = as_expr(terms), as_expr(magnitude), what

    def atol(self, dtype, env):
        u = unit_roundoff(dtype)
        n, s = self.terms.real(env), self.magnitude.real(env)
        value = 4 * u * s * math.sqrt(n)
        return value, (f"{self.what or 'rounded operands'}: {n:g} values of RMS {s:.3g} rounded to {_name(dtype)} "
                       f"and mixed by random-sign weights -> 4*u*s*sqrt(n) = {value:.3g}")

    def describe(self) -> str:
        return (f"{self.what or 'operands'}: {show(self.terms)} values of RMS {show(self.magnitude)} rounded once, "
                f"mixed by random-sign weights")


class Relative(_Float):
    """`terms` roundings in `accumulate` precision that reach the output in proportion to each value."""

    def __init__(self, terms: Size, accumulate: str = "dtype", what: str = ""):
        if accumulate not in ("dtype", "float32"):
            raise ValueError(f"Relative(accumulate=...) must be 'dtype' or 'float32', got {accumulate!r}")
        self.terms, self.accumulate, self.what = as_expr(terms), accumulate, what

    def _value(self, dtype, env) -> tuple[float, torch.dtype]:
        wider = unit_roundoff(dtype) < unit_roundoff(torch.float32)
        acc = dtype if self.accumulate == "dtype" or wider else torch.float32
        return unit_roundoff(acc) * self.terms.real(env), acc

    def atol(self, dtype, env):
        value, acc = self._value(dtype, env)
        return 0.0, (f"{self.what or 'relative errors'}: {self.terms.real(env):g} roundings in {_name(acc)} "
                     f"relative to each value -> rtol += u*n = {value:.3g}")

    def rtol(self, dtype, env):
        return self._value(dtype, env)[0]

    def describe(self) -> str:
        return (f"{self.what or 'relative errors'}: {show(self.terms)} roundings "
                f"({'the dtype' if self.accumulate == 'dtype' else 'fp32'}) relative to each value")


class Fft(_Float):
    """A discrete Fourier transform of `points` points whose outputs have RMS `magnitude` (a complex output
    is compared on both parts): each of the log2(points) butterfly stages rounds once, so the error grows
    like u log2(N) times the outputs' magnitude. atol += 4 u log2(N) s: a float32 rfft's largest error against
    float64 stays within a third of that for N = 16 to 65536, so any FFT ordering of the same stages fits
    (docs/measurements/2026-12-02-tolerance-margins-cpu.md, "The FFT rule")."""

    def __init__(self, points: Size, magnitude: Size = 1, what: str = ""):
        self.points, self.magnitude, self.what = as_expr(points), as_expr(magnitude), what

    def atol(self, dtype, env):
        u = unit_roundoff(dtype)
        n, s = self.points.real(env), self.magnitude.real(env)
        value = 4 * u * math.log2(max(n, 2)) * s
        return value, (f"{self.what or 'FFT'}: {n:g} points, outputs of RMS {s:.3g}, rounded in {_name(dtype)} at "
                       f"each of log2(N) stages -> 4*u*log2(N)*s = {value:.3g}")

    def describe(self) -> str:
        return f"{self.what or 'FFT'} of {show(self.points)} points, outputs of RMS {show(self.magnitude)}"


class Ulps(Rule):
    """Up to `steps` representable steps of a fixed `dtype` (a dtype name; None: the task dtype) apart:
    for outputs whose precision is not the task's, such as fp8 quantised values and fp32 scales."""

    def __init__(self, steps: int, dtype: str | None = None, what: str = ""):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"Ulps(steps=...) must be a positive integer, got {steps!r}")
        if dtype is not None and not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"Ulps(dtype=...) must name a torch floating dtype such as 'float8_e4m3fn', "
                             f"got {dtype!r}")
        self.steps, self.dtype, self.what = steps, dtype, what

    def __call__(self, dtype, env, output_dtype=None):
        target = getattr(torch, self.dtype) if self.dtype is not None else (output_dtype or dtype)
        if not target.is_floating_point:
            return Tolerance(0.0, 0.0, "integer outputs are compared exactly")
        info = torch.finfo(target)
        atol, rtol = self.steps * info.tiny * info.eps, self.steps * 2 * unit_roundoff(target)
        return Tolerance(atol, rtol, f"{self.what or 'values'} stored in {_name(target)}: up to {self.steps} "
                                     f"representable step{'s' if self.steps > 1 else ''} apart -> atol "
                                     f"{atol:.3g} (subnormal steps), rtol {rtol:.3g} ({self.steps} x 2u)")

    def describe(self) -> str:
        where = self.dtype or "the task dtype"
        return f"{self.what or 'values'}: within {self.steps} step(s) of {where}"


@dataclass(frozen=True)
class Combined(Rule):
    parts: tuple[Rule, ...]

    def __call__(self, dtype, env, output_dtype=None):
        exact = [p for p in self.parts if isinstance(p, Exact)]
        if exact:
            if len(self.parts) > 1:
                raise ValueError("an Exact rule cannot be combined with float rules")
            return exact[0](dtype, env)
        final = output_dtype or dtype
        if not (dtype.is_floating_point or dtype.is_complex) or not (final.is_floating_point or final.is_complex):
            return Tolerance(0.0, 0.0, "integer outputs are compared exactly")
        atol, rtol, relative, reasons = 0.0, 0.0, 0.0, []
        u = unit_roundoff(final)
        for part in self.parts:
            if isinstance(part, _Float):
                value, why = part.atol(dtype, env)
                atol += value
                rtol = max(rtol, 4 * u)
                relative += part.rtol(dtype, env)
                reasons.append(why)
            else:
                tol = part(dtype, env, output_dtype)
                atol, rtol = atol + tol.atol, max(rtol, tol.rtol)
                reasons.append(tol.reason)
        reasons.append(f"rtol 4u = {4 * u:.3g} (u = {_ROUNDOFF_TEXT.get(u, f'{u:.3g}')}): both results "
                       f"rounded to {_name(final)} once")
        return Tolerance(atol, rtol + relative, "; ".join(reasons))

    def describe(self) -> str:
        return " + ".join(p.describe() for p in self.parts)


@dataclass(frozen=True)
class Fixed(Rule):
    """Measured tolerances per dtype, for error without a rounding model; the reason says how measured."""

    by_dtype: Mapping[str, Tolerance]

    def __call__(self, dtype, env, output_dtype=None):
        name = _name(dtype)
        if name not in self.by_dtype:
            raise ValueError(f"Fixed tolerance has no entry for {name}; it covers {sorted(self.by_dtype)}")
        return self.by_dtype[name]

    def describe(self) -> str:
        return "fixed per dtype: " + "; ".join(f"{k}: {v.reason}" for k, v in self.by_dtype.items())


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
