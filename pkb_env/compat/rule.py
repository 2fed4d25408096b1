"""PKB's own check of a candidate's outputs, for the record beside pkb-env's verdict (docs/pkb_compat.md).

PKB's harness (utils/problem_id.py, as its documentation and code describe it) compares each rank's saved
outputs with the reference's: dicts by the same keys, tuples and lists by length, tensors by shape and then
`torch.allclose(got.float(), expected.float(), atol, rtol)` with atol = rtol = 1e-2 (its defaults since commit
d4e0845), so the dtype is not compared, integers pass within 1%, NaN never matches and a complex tensor keeps
its real part; anything else by `==`. PKB checks the first call of each trial only and never an input updated
in place unless the function also returns it. This module says whether values pass that rule; it judges
nothing by itself.
"""
from __future__ import annotations

from typing import Any

import torch

ATOL = RTOL = 1e-2


def pkb_close(expected: Any, got: Any) -> bool:
    """Whether `got` passes PKB's comparison with `expected`."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(expected.shape):
            return False
        return bool(torch.allclose(_real(got), _real(expected), atol=ATOL, rtol=RTOL))
    if isinstance(expected, dict):
        return isinstance(got, dict) and set(got) == set(expected) and all(pkb_close(expected[k], got[k])
                                                                           for k in expected)
    if isinstance(expected, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(expected) and all(
            pkb_close(e, g) for e, g in zip(expected, got))
    if isinstance(got, torch.Tensor):
        return False
    return bool(expected == got)


def _real(t: torch.Tensor) -> torch.Tensor:
    """`.float()` as PKB applies it (a complex tensor keeps its real part), on the CPU."""
    t = t.detach().to("cpu")
    return (t.real if t.is_complex() else t).float()
