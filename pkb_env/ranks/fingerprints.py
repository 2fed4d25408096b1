"""Fingerprints of timed calls: secret random projections that let the judge check every timed output.

Shipping every output of every timed call to the judge costs too much; checking a sample of them lets
a candidate that is wrong now and then pass. So the rank computes, after a burst and outside its timed
window, a few numbers per output tensor from a seed the judge sends only then (the candidate cannot have
known it while it produced the outputs); the reference rank set computes the same numbers for the same
inputs, and the judge compares them (pkb_env/judge/fingerprints.py). Two kinds:

* exact (integers, booleans, floats whose tolerance is zero, and every input): the tensor's bits, as
  integer words, dotted with random 63-bit multipliers, modulo 2^64 (integer arithmetic wraps, and a
  wrapped sum does not depend on the order of addition, so both sides get the same bits). NaN payloads
  and the sign of zero are made canonical first, as the element-wise comparison treats them as equal.
  A single wrong word goes unnoticed with probability below 2^-47 per multiplier.
* projected (floats compared at a tolerance): the tensor is cut into at most `MAX_BLOCKS` blocks; per
  block, `PROJECTIONS` sums of the values times independent random signs, computed in float64, plus
  the block's sum of |values| (for the rounding allowance) and, on the reference side, the sum of the
  squared element tolerances (for the bound). Non-finite values are zeroed and their positions hashed
  exactly (NaN, +inf, -inf must match where they are). Why this detects wrong outputs and never rejects
  right ones: docs/timing.md, "Every timed output is checked". Beside them, `PICKS` of the values at
  positions drawn from the same late seed, sent whole (`_positions`): compared element by element, they catch
  what an aggregate bound cannot (an error just over the tolerance on many elements of one call).

Everything is plain torch on the rank's own device; the same code runs for candidate and reference.
A burst's calls almost always share one structure, so the payload names each distinct structure once
(`forms`) and gives every call the index of its own (`form`); call lists are int64 tensors. The judge
reads hundreds of these per step: unpickling one small list per call cost more than fingerprinting.
"""
from __future__ import annotations

import math
import sys
from collections import defaultdict
from typing import Any

import torch

from pkb_env.contract.results import row_order
from pkb_env.ranks.outputs import skeleton, tensors
from pkb_env.ranks.tripwire import watch
from pkb_env.task import derive_seed

PROJECTIONS = 4
PICKS = 256                # elements of every projected tensor of every call sent whole, at secret positions
MULTIPLIERS = 2
MIN_BLOCK = 4096
MAX_BLOCKS = 64
COLUMNS = 1 << 21          # elements of one tensor handled at once
WORK_ELEMENTS = {"cpu": 1 << 23, "cuda": 1 << 25}  # calls x columns handled at once (bounds the float64
                           # temporaries: 64 MiB each on CPU ranks, 256 MiB on a GPU, where each chunk
                           # costs a host synchronisation and a dozen launches whatever its size)
_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def layout(n: int) -> tuple[int, int]:
    """(block size, number of blocks) for a tensor of `n` values."""
    if n <= MIN_BLOCK:
        return max(n, 1), 1
    block = max(MIN_BLOCK, -(-n // MAX_BLOCKS))
    return block, -(-n // block)


def fingerprint_calls(values: list[Any], seed: int, rules: dict[str, list] | None, bound: bool = False,
                 root: str = "output", strict: bool | None = None) -> dict[str, Any]:
    """{"forms": the distinct skeletons, "form": per call the index of its skeleton (int64 tensor),
    "groups": fingerprints of tensors sharing (path, dtype, shape), each with its "calls" (int64 tensor)}.

    `rules`: path -> [atol, rtol, order] (the step's comparison checks; the longest declared path a tensor
    lies under applies; order: False, True for rows as a set, or the path of the ids whose row order both
    sides take); None: everything exact and in order. A floating tensor whose tolerance is zero is compared
    bit-exactly. `strict` (default: rules given): refuse objects that are not tensors or plain values;
    otherwise (inputs, which hold process groups) describe them by type. `bound`: also compute the bound
    terms (the reference's side). `root` names the values in paths.
    """
    forms: dict[str, int] = {}
    distinct, form = [], []
    for v in values:
        structure = skeleton(v, root, strict=rules is not None if strict is None else strict)
        key = repr(structure)
        if key not in forms:
            forms[key] = len(distinct)
            distinct.append(structure)
        form.append(forms[key])
    by_kind: dict[tuple, list[tuple[int, torch.Tensor]]] = defaultdict(list)
    for call, value in enumerate(values):
        found = dict(tensors(value, root))
        for path, t in found.items():
            t = _ordered(t, _rule(path, rules)[2], found)
            by_kind[(path, t.dtype, tuple(t.shape))].append((call, t))
    groups = []
    for (path, dtype, shape), members in by_kind.items():
        atol, rtol, _ = _rule(path, rules)
        flat = [_flat(t) for _, t in members]
        entry: dict[str, Any] = {"path": path, "dtype": str(dtype).removeprefix("torch."), "shape": list(shape),
                                 "calls": torch.tensor([c for c, _ in members], dtype=torch.int64)}
        floating = dtype.is_floating_point or dtype.is_complex
        if floating and (atol or rtol):
            entry.update(_projected(flat, derive_seed(seed, path), (atol, rtol) if bound else None))
        else:
            entry.update(_exact(flat, derive_seed(seed, path), floating))
        groups.append(entry)
    return {"forms": distinct, "form": torch.tensor(form, dtype=torch.int64), "groups": groups}


def _rule(path: str, rules: dict[str, list] | None) -> tuple[float, float, bool | str]:
    for key in sorted(rules or {}, key=len, reverse=True):
        if path == key or path.startswith(key + "["):
            atol, rtol, order = rules[key]
            return float(atol), float(rtol), order if isinstance(order, str) else bool(order)
    return 0.0, 0.0, False


def _ordered(t: torch.Tensor, order: bool | str, found: dict[str, torch.Tensor]) -> torch.Tensor:
    """`t` with its rows in the order the rule asks: sorted (a set), or in the order of the ids at the
    path `order` (rows keyed by an integer output; the judge's compare does the same, judge/compare.py).
    Ids that are missing or of another length leave `t` as it is (its structure differs anyway)."""
    if order is True:
        return t.detach()[row_order(t)] if t.dim() else t
    if isinstance(order, str):
        ids = found.get(order)
        if ids is not None and ids.dim() and t.dim() and ids.shape[0] == t.shape[0]:
            return t.detach()[row_order(ids).to(t.device)]
    return t


def _flat(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.reshape(-1)


def _spans(n: int, block: int) -> list[tuple[int, int]]:
    """Column ranges [start, stop) made of whole blocks (the last may end in a partial block); none for an
    empty tensor (its fingerprint is the zeros it starts from: a rank may rightly return no elements)."""
    width = block * max(1, COLUMNS // block)
    return [(start, min(start + width, n)) for start in range(0, n, width)]


def _generator(device: torch.device, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def _stack(flat: list[torch.Tensor], rows: slice, start: int, stop: int, width: int) -> torch.Tensor:
    """Rows `rows` of the values in columns [start, stop), zero-padded to `width` columns."""
    part = torch.stack([f[start:stop] for f in flat[rows]])
    if stop - start < width:
        part = torch.nn.functional.pad(part, (0, width - (stop - start)))
    return part


def _work_rows(device: torch.device, width: int) -> int:
    """Calls handled at once for `width` columns (WORK_ELEMENTS)."""
    return max(1, WORK_ELEMENTS.get(device.type, WORK_ELEMENTS["cpu"]) // max(width, 1))


def _multipliers(device: torch.device, seed: int, width: int) -> torch.Tensor:
    return torch.empty((MULTIPLIERS, width), dtype=torch.int64, device=device).random_(
        generator=_generator(device, seed))


def _exact(flat: list[torch.Tensor], seed: int, floating: bool) -> dict[str, Any]:
    calls, n = len(flat), flat[0].numel()
    device = flat[0].device
    total = torch.zeros((calls, MULTIPLIERS), dtype=torch.int64, device=device)
    for start, stop in _spans(n, 1):
        width = stop - start
        mult = _multipliers(device, derive_seed(seed, "exact", start), width)
        step = _work_rows(device, width)
        for row in range(0, calls, step):
            rows = slice(row, row + step)
            words = _words(_stack(flat, rows, start, stop, width), floating)
            for j in range(MULTIPLIERS):
                total[rows, j] += (words * mult[j]).sum(-1)  # wraps modulo 2^64 on every device
    return {"kind": "exact", "n": n, "e": total.cpu()}


def _words(values: torch.Tensor, floating: bool) -> torch.Tensor:
    """The values' bits as int64 words; NaN made canonical and -0.0 made +0.0 for floats (in float32, or
    float64 for float64: widening is exact, and 8- and 16-bit floats lack arithmetic on some devices)."""
    if floating:
        values = values.to(torch.float64 if values.dtype == torch.float64 else torch.float32)
        values = torch.where(torch.isnan(values), torch.full_like(values, math.nan), values + 0)
    if values.dtype == torch.bool:
        values = values.to(torch.uint8)
    return values.contiguous().view(_WORDS[values.element_size()]).to(torch.int64)


def _projected(flat: list[torch.Tensor], seed: int, tolerance: tuple[float, float] | None) -> dict[str, Any]:
    calls, n = len(flat), flat[0].numel()
    device = flat[0].device
    block, blocks = layout(n)
    p = torch.zeros((calls, PROJECTIONS, blocks), dtype=torch.float64, device=device)
    a = torch.zeros((calls, blocks), dtype=torch.float64, device=device)
    t2 = torch.zeros((calls, blocks), dtype=torch.float64, device=device) if tolerance is not None else None
    codes = torch.zeros((calls, MULTIPLIERS), dtype=torch.int64, device=device)
    at = _positions(n, seed, device)
    x = torch.zeros((calls, at.numel()), dtype=torch.float64, device=device)  # the values at `at`, whole
    for start, stop in _spans(n, block):
        first, count = start // block, -(-(stop - start) // block)
        width = count * block
        gen = _generator(device, derive_seed(seed, "signs", start))
        signs = torch.randint(0, 2, (PROJECTIONS, count, block), generator=gen, device=device,
                              dtype=torch.int8).to(torch.float64).mul_(2).sub_(1)
        mult = _multipliers(device, derive_seed(seed, "special", start), width)
        real = (torch.arange(width, device=device) < stop - start).view(count, block)  # not padding
        inside = (at >= start) & (at < stop)
        picked, local = inside.nonzero().squeeze(1), at[inside] - start
        step = _work_rows(device, width)
        for row in range(0, calls, step):
            rows = slice(row, row + step)
            values = _stack(flat, rows, start, stop, width).to(torch.float64)
            x[rows, picked] = values[:, local]   # NaN and infinities kept: the judge's rule is compare.py's
            finite = torch.isfinite(values)
            if not bool(finite.all()):  # where NaN, +inf and -inf are must match exactly
                special = (torch.isnan(values).to(torch.int64) + 2 * (values == math.inf).to(torch.int64)
                           + 3 * (values == -math.inf).to(torch.int64))
                for j in range(MULTIPLIERS):
                    codes[rows, j] += (special * mult[j]).sum(-1)
                values = torch.where(finite, values, torch.zeros_like(values))
            values = values.view(-1, count, block)
            span = slice(first, first + count)
            p[rows, :, span] = torch.einsum("kgb,mgb->kmg", values, signs)
            magnitude = values.abs()
            a[rows, span] = magnitude.sum(-1)
            if t2 is not None:
                atol, rtol = tolerance
                bound = (atol + rtol * magnitude) * (finite.view(-1, count, block) & real)
                t2[rows, span] = (bound * bound).sum(-1)
    entry = {"kind": "projected", "n": n, "block": block, "p": p.cpu(), "a": a.cpu(), "e": codes.cpu(),
             "x": x.cpu()}
    if t2 is not None:
        entry["t2"] = t2.cpu()
    return entry


def _positions(n: int, seed: int, device: torch.device) -> torch.Tensor:
    """The positions whose values are sent whole (min(n, PICKS) of them; every position where n <= PICKS),
    drawn from the seed the judge sends after the burst, so a candidate cannot know them while it makes
    its outputs. The judge compares those values element by element at the tolerance, which resolves what
    a projection's aggregate bound cannot (an error just over the tolerance on many elements of one call;
    docs/timing.md, "Resolution"). Gathered from the chunks the projections read (one gather per chunk of
    calls, not per call: hundreds of calls per burst on a GPU)."""
    if n <= PICKS:
        return torch.arange(n, device=device)
    return torch.randint(n, (PICKS,), generator=_generator(device, derive_seed(seed, "picks")), device=device)


watch(sys.modules[__name__], "fingerprint_calls", "_exact", "_projected", "_words", "_stack", "_rule", "_ordered",
      "row_order", "_work_rows", "_positions")
