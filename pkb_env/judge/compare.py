"""Compare: one rank's outputs against the reference's, element by element, in the trusted judge.

Outputs may be a tensor, None, or tuples/lists/dicts of them (docs/architecture.md, "The task contract").
The comparison walks both structures together and reports every place they differ as a `Mismatch` with
enough numbers for the agent to act on: where (the path), how many elements, how far off, and the first
bad element's values.

The rules, chosen so that nothing passes by accident:
* dtype must match exactly (a bf16 answer to an fp32 task is a different answer, not a rounding);
  shape must match; device is ignored (both are compared on the CPU).
* integers and booleans: exact. Floating point: `|got - expected| <= atol + rtol * |expected|`, computed
  in float64 so the check itself adds no rounding. Complex: the same on real and imaginary parts.
* NaN in expected matches only NaN in got; NaN or Inf in got where expected is finite is wrong; an
  infinity matches only the same infinity.
* a tensor subclass, a meta/sparse tensor or a non-tensor where a tensor was expected is a mismatch:
  outputs must be plain, materialised tensors (lazy or subclassed outputs are an exploit route).
* tuples and lists are one family (a list answer to a tuple output is fine); dicts must have the same
  keys; Python scalars compare by type family and value (floats at the tolerance, with the NaN policy).
* each output has its own `Check` (its tolerance, from the task's rule of dtype and size, see
  pkb_env/contract/tolerance.py); a nested value follows the check of the output it belongs to.
  Outputs whose rows may come in any order (`unordered`: variable-length sets of indices) are sorted by
  row on both sides before the exact comparison; their shapes must still agree.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Union

import numpy as np
import torch

from pkb_env.contract import Check, Tolerance, results
from pkb_env.record import Mismatch

Checks = Union[Tolerance, Check, Mapping[str, Check]]

_CHUNK = 1 << 22  # elements per step of the float64 check: bounds the judge's extra memory
_LARGEST = torch.finfo(torch.float64).max


def compare_outputs(expected: Any, got: Any, checks: Checks, trial: str, rank: int, root: str = "output",
                    ) -> list[Mismatch]:
    """Every difference between `got` and `expected`; `checks` is one tolerance for everything, or a check
    per path (TaskSpec.output_checks). `root` names the values in paths: "output" for what the call
    returned, "updated" for the in-place results (a dict by input name). An empty list means equal."""
    if isinstance(checks, Tolerance):
        checks = Check(checks)
    table = {root: checks} if isinstance(checks, Check) else dict(checks)
    expected, got = _keyed_order(expected, got, table, root)
    out: list[Mismatch] = []
    _compare(expected, got, root, table, trial, rank, out)
    return out


def _keyed_order(expected: Any, got: Any, table: Mapping[str, Check], root: str) -> tuple[Any, Any]:
    """Both sides with the rows of every `order_by` output put in the order of their own ids (the key
    output's rows, lexicographic; ids are unique per rank, so the order is defined). Where a side's ids are
    missing or do not match the rows in number, it is left as it is: the walk reports the difference."""
    for path, check in table.items():
        if check.order_by is None or not path.startswith(root):
            continue
        sides = []
        for value in (expected, got):
            rows, ids = results.at(value, path), results.at(value, check.order_by)
            if (isinstance(rows, torch.Tensor) and isinstance(ids, torch.Tensor) and rows.dim() and ids.dim()
                    and rows.shape[0] == ids.shape[0]):
                value = results.with_value(value, path, rows[results.row_order(ids.to("cpu")).to(rows.device)])
            sides.append(value)
        expected, got = sides
    return expected, got


def _check_for(path: str, table: Mapping[str, Check]) -> Check:
    """The check of the longest declared path that `path` lies under."""
    for key in sorted(table, key=len, reverse=True):
        if path == key or path.startswith(key + "["):
            return table[key]
    raise ValueError(f"no comparison rule covers {path}; declared: {sorted(table)}")


def summarize_mismatches(mismatches: list[Mismatch], limit: int = 5) -> str:
    """A compact text for the agent: one line per mismatch (up to `limit`), then what was left out."""
    lines = []
    for m in mismatches[:limit]:
        line = f"rank {m.rank}, {m.trial}, {m.path}: {m.message}"
        if m.first_index is not None and m.expected is not None:
            line += f"; first at {list(m.first_index)}: expected {m.expected}, got {m.got}"
        lines.append(line)
    rest = mismatches[limit:]
    if rest:
        ranks = sorted({m.rank for m in rest})
        lines.append(f"... and {len(rest)} more mismatch(es) on rank(s) {', '.join(map(str, ranks))}")
    return "\n".join(lines)


# -- structure -------------------------------------------------------------------------------------

def _compare(expected: Any, got: Any, path: str, table: Mapping[str, Check], trial: str, rank: int,
             out: list[Mismatch]) -> None:
    def miss(message: str, **numbers: Any) -> None:
        out.append(Mismatch(trial=trial, rank=rank, path=path, message=message, **numbers))

    if isinstance(expected, torch.Tensor):
        problem = _tensor_problem(expected, got)
        if problem:
            miss(problem)
        else:
            check = _check_for(path, table)
            if check.unordered:
                expected, got = _sorted_rows(expected), _sorted_rows(got)
            numbers = _compare_tensors(expected, got, check.tolerance)
            if numbers:
                if check.unordered:
                    numbers["message"] += " (rows compared as a set: both sides sorted)"
                if check.order_by is not None:
                    numbers["message"] += f" (rows put in the order of {check.order_by} on both sides)"
                miss(**numbers)
    elif expected is None:
        if got is not None:
            miss(f"expected None, got {_describe(got)}")
    elif isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            miss(f"expected a {type(expected).__name__} of length {len(expected)}, got {_describe(got)}")
        elif len(got) != len(expected):
            miss(f"expected a {type(expected).__name__} of length {len(expected)}, "
                 f"got a {type(got).__name__} of length {len(got)}")
        else:
            for i, (e, g) in enumerate(zip(expected, got)):
                _compare(e, g, f"{path}[{i}]", table, trial, rank, out)
    elif isinstance(expected, dict):
        if not isinstance(got, dict):
            miss(f"expected a dict with keys {_keys(expected)}, got {_describe(got)}")
            return
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            parts = ([f"missing keys {_keys(missing)}"] if missing else []) + \
                    ([f"unexpected keys {_keys(extra)}"] if extra else [])
            miss(f"dict keys differ: {', '.join(parts)}")
        for k in expected:
            if k in got:
                _compare(expected[k], got[k], f"{path}[{k!r}]", table, trial, rank, out)
    else:
        problem = _scalar_problem(expected, got, _check_for(path, table).tolerance)
        if problem:
            miss(problem, expected=_short(expected), got=_short(got))


def _tensor_problem(expected: torch.Tensor, got: Any) -> str | None:
    """Why `got` cannot be compared with `expected` element-wise (kind, layout, dtype, shape), or None."""
    want = f"{_dtype(expected.dtype)} tensor of shape {list(expected.shape)}"
    if not isinstance(got, torch.Tensor):
        return f"expected a {want}, got {_describe(got)}"
    if type(got) is not torch.Tensor:
        return f"expected a plain torch.Tensor, got the subclass {type(got).__name__}: return a plain tensor"
    if got.device.type == "meta":
        return "got a meta tensor, which holds no data: return a materialised tensor"
    if got.is_nested:
        return "got a nested tensor: return a dense (strided) tensor"
    if got.layout != torch.strided or got.is_quantized:
        return f"got a {str(got.layout).removeprefix('torch.')} tensor: return a dense (strided) tensor"
    if got.dtype != expected.dtype:
        return f"dtype {_dtype(got.dtype)}, expected {_dtype(expected.dtype)}"
    if got.shape != expected.shape:
        return f"shape {list(got.shape)}, expected {list(expected.shape)}"
    return None


# -- tensors ---------------------------------------------------------------------------------------

def _compare_tensors(expected: torch.Tensor, got: torch.Tensor, tol: Tolerance) -> dict[str, Any] | None:
    """Mismatch fields when same-dtype, same-shape tensors differ; None when they agree."""
    e = expected.detach().resolve_conj().resolve_neg().to("cpu").reshape(-1)
    g = got.detach().resolve_conj().resolve_neg().to("cpu").reshape(-1)
    total = e.numel()
    if total == 0:
        return None
    dtype = expected.dtype
    floating = dtype.is_floating_point or dtype.is_complex
    if torch.equal(e, g):  # the common case, and all of data movement: equal, no NaN anywhere
        return None
    if floating and not dtype.is_complex and _all_close(e, g, tol):  # a correct answer rounded otherwise
        return None

    bad_count, first, max_abs, max_rel, spurious = 0, None, 0.0, 0.0, 0
    has_rel = False
    for start in range(0, total, _CHUNK):
        ec, gc = e[start:start + _CHUNK], g[start:start + _CHUNK]
        if dtype.is_complex:
            ok, abs_err, rel_err = _close_complex(ec, gc, tol)
        elif floating:
            ec, gc = ec.double(), gc.double()
            ok, abs_err, rel_err = _close_real(ec, gc, tol)
            spurious += int((torch.isfinite(ec) & ~torch.isfinite(gc)).sum())
        else:
            ok = ec == gc
            abs_err = (gc.double() - ec.double()).abs()
            rel_err = _relative(abs_err, ec.double().abs())
        bad = ~ok
        n_bad = int(bad.sum())
        if n_bad and first is None:
            first = start + int(bad.view(torch.uint8).argmax())   # the first True (argmax takes the first maximum)
        bad_count += n_bad
        max_abs = max(max_abs, float(abs_err.max()))
        chunk_rel = float(rel_err.nan_to_num(nan=-1.0, posinf=math.inf).max())   # NaN: no relative error there
        if chunk_rel >= 0:
            has_rel = True
            max_rel = max(max_rel, chunk_rel)
    if not bad_count:
        return None

    rule = ("exact match required" if not floating or tol.exact
            else f"beyond atol {tol.atol:g} + rtol {tol.rtol:g}")
    errs = f"max abs err {_num(max_abs)}" + (f", max rel err {_num(max_rel)}" if has_rel else "")
    special = f"; {spurious} NaN or infinite where the reference is finite" if spurious else ""
    return dict(message=f"{bad_count}/{total} elements differ ({rule}; {errs}){special}",
                max_abs_err=max_abs, max_rel_err=max_rel if has_rel else None, bad_elements=bad_count,
                total_elements=total, first_index=_unravel(first, list(expected.shape)),
                expected=_short(e[first].item()), got=_short(g[first].item()))


def _sorted_rows(t: torch.Tensor) -> torch.Tensor:
    """`t` with its rows (dim 0) in lexicographic order, so that two orderings of one set compare equal."""
    if t.dim() == 0 or t.shape[0] < 2:
        return t
    flat = t.detach().to("cpu").reshape(t.shape[0], -1)
    keys = flat.to(torch.int64).numpy() if flat.dtype == torch.bool else flat.numpy()
    order = np.lexsort(keys.T[::-1]) if keys.shape[1] else np.arange(keys.shape[0])
    return t.detach().to("cpu")[torch.from_numpy(order)]


def _all_close(e: torch.Tensor, g: torch.Tensor, tol: Tolerance) -> bool:
    """Whether every element of `g` is within the tolerance of a finite `e`, in float64 chunks, stopping at the
    first chunk where one is not. The answer of a correct candidate that rounds otherwise than the reference
    costs three fused passes a chunk instead of the full account's (`python benchmarks/compare_cost.py`:
    docs/measurements/2026-12-02-symmetric-memory-and-throughput-h200.md, "The cost of comparing one output");
    a wrong one pays one chunk more. Non-finite
    expected values never pass here (their bound is capped below an infinite difference, and a NaN compares
    false): they take the full account, which has the NaN/Inf policy."""
    for start in range(0, e.numel(), _CHUNK):
        ec = e[start:start + _CHUNK].double()    # no copy where it is float64 already: never written to
        diff = torch.sub(g[start:start + _CHUNK].double(), ec).abs_()
        if not bool(diff.le_(_bound(ec.abs(), tol).clamp_(max=_LARGEST)).all()):
            return False
    return True


def _bound(magnitude: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """atol + rtol * |expected|, a new tensor: the one expression both the fast path and the full account
    compare with, so that they accept exactly the same elements."""
    return (magnitude * tol.rtol).add_(tol.atol)


def _close_real(e: torch.Tensor, g: torch.Tensor, tol: Tolerance) -> tuple[torch.Tensor, ...]:
    """Element-wise verdict, absolute and relative error for float64 chunks, with the NaN/Inf policy.

    Where `e` is finite, `diff <= bound` alone is the verdict (an infinite or NaN `g` gives an infinite or NaN
    difference, which fails it) and a wrong element's error is its difference, infinite where that is NaN;
    the policy for non-finite expected values is applied only where there are some."""
    diff = (g - e).abs_()
    magnitude = e.abs()
    ok = diff <= _bound(magnitude, tol)
    finite = torch.isfinite(e)
    if bool(finite.all()):
        return ok, diff.masked_fill_(torch.isnan(diff), math.inf), _relative(diff, magnitude)
    ok = torch.where(finite, ok, torch.where(torch.isnan(e), torch.isnan(g), g == e))
    special_ok = ~finite & ok
    abs_err = torch.where(special_ok, torch.zeros_like(diff), torch.where(ok, diff, _inf_or(diff)))
    return ok, abs_err, _relative(abs_err, magnitude)


def _close_complex(e: torch.Tensor, g: torch.Tensor, tol: Tolerance) -> tuple[torch.Tensor, ...]:
    ok_re, abs_re, rel_re = _close_real(e.real.double(), g.real.double(), tol)
    ok_im, abs_im, rel_im = _close_real(e.imag.double(), g.imag.double(), tol)
    return ok_re & ok_im, torch.maximum(abs_re, abs_im), torch.fmax(rel_re, rel_im)


def _inf_or(diff: torch.Tensor) -> torch.Tensor:
    """A wrong element's error: its difference when that is a number, else infinity (NaN/Inf in got)."""
    return torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)


def _relative(abs_err: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    """abs_err / |expected| where expected is a non-zero number; NaN (left out of the max) elsewhere."""
    usable = (magnitude > 0) & torch.isfinite(magnitude)
    return torch.where(usable, abs_err / magnitude, math.nan)


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return index[::-1]


# -- scalars and text ------------------------------------------------------------------------------

def _scalar_problem(expected: Any, got: Any, tol: Tolerance) -> str | None:
    """Python scalars (and other plain values): same type family, then equal (floats: at the tolerance)."""
    kind = type(expected)
    if kind is bool or kind is int or kind is str or kind is bytes:
        ok_type = type(got) is kind
    elif kind is float:
        ok_type = type(got) in (float, int)
    elif kind is complex:
        ok_type = type(got) in (complex, float, int)
    else:
        ok_type = type(got) is kind
    if not ok_type:
        return f"expected {kind.__name__} {_short(expected)}, got {_describe(got)}"
    if kind in (float, complex):
        e = complex(expected)
        g = complex(got)
        parts = [(e.real, g.real), (e.imag, g.imag)]
        if all(scalar_close(a, b, tol) for a, b in parts):
            return None
        return f"expected {_short(expected)}, got {_short(got)}"
    try:
        equal = bool(expected == got)
    except Exception as exc:  # a value whose == raises cannot be shown equal
        return f"cannot compare {kind.__name__} values ({type(exc).__name__})"
    return None if equal else f"expected {_short(expected)}, got {_short(got)}"


def scalar_close(e: float, g: float, tol: Tolerance) -> bool:
    if math.isnan(e):
        return math.isnan(g)
    if math.isinf(e):
        return g == e
    return math.isfinite(g) and abs(g - e) <= tol.atol + tol.rtol * abs(e)


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a {_dtype(value.dtype)} tensor of shape {list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of length {len(value)}"
    if isinstance(value, dict):
        return f"a dict with keys {_keys(value)}"
    if isinstance(value, (bool, int, float, complex)):
        return f"{type(value).__name__} {_short(value)}"
    return f"an object of type {type(value).__name__}"


def _keys(keys: Any) -> str:
    return "[" + ", ".join(repr(k) for k in list(keys)[:8]) + (", ..." if len(keys) > 8 else "") + "]"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _num(x: float) -> str:
    return f"{x:.4g}"


def _short(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, complex):
        return f"({value.real:.6g}{value.imag:+.6g}j)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
