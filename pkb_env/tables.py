"""Plain-text tables for the terminal (no dependency; aligned columns, numbers right-aligned).

A column of numbers (None shown as "-") is right-aligned with one number of decimals for all its floats, the
most any of them needs at 4 significant digits (at most 6), so that decimal points line up and no figure is
printed in exponent form (`3.034e+04` ms in a stage table, rewards of "-0.8" above "0.3457", read badly).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

MAX_DECIMALS = 6


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    columns = [[row[i] for row in rows] for i in range(len(headers))]
    numeric = [any(_is_number(v) for v in col) and all(v is None or _is_number(v) for v in col) for col in columns]
    decimals = [_decimals(col) for col in columns]
    cells = [[_fmt(v, d) for v, d in zip(row, decimals)] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _decimals(column: Sequence[Any]) -> int:
    """The decimals a column's floats are printed with: the most any finite one needs at 4 significant digits."""
    needed = [_needed(v) for v in column if isinstance(v, float) and math.isfinite(v)]
    return min(MAX_DECIMALS, max(needed, default=0))


def _needed(value: float) -> int:
    """Decimals that show `value` to 4 significant digits, trailing zeros dropped (30340.0 -> 0, 0.45 -> 2)."""
    if value == 0:
        return 0
    places = max(0, 3 - math.floor(math.log10(abs(value))))
    text = f"{value:.{places}f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


def _fmt(value: Any, decimals: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{decimals}f}" if math.isfinite(value) else str(value)
    return str(value)
