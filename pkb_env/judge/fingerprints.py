"""Check every timed call: a candidate's fingerprints against the reference's, for the same inputs.

The ranks fingerprint each burst's outputs and inputs after the burst with a seed the judge sends only
then (pkb_env/ranks/fingerprints.py); the reference rank set replays the same inputs and fingerprints
its outputs with the same seed. Here the two are compared, call by call and rank by rank:

* structure (containers, dict keys, dtypes, shapes, Python scalars) must match exactly (scalars:
  floats at the tolerance);
* exact fingerprints (integers, booleans, zero-tolerance floats, every input) must be equal;
* a projected fingerprint (floats at a tolerance) must agree, block by block and projection by
  projection, within `bound`: for any difference d = got - expected whose elements each stay within
  the tolerance t_i = atol + rtol |expected_i|, and random signs r independent of d (the seed did not
  exist when the outputs were made), Hoeffding's inequality gives P(|<r, d>| > lambda ||t||_2) <=
  2 exp(-lambda^2 / 2); lambda = 8.39 makes that 1e-15 per comparison. Each side's float64 rounding
  adds at most gamma_b * sum |values| (b = block size, gamma_b = b u / (1 - b u), u = 2^-53), whatever
  the order of summation. A right answer is thus rejected with probability below 1e-15 per comparison;
  a wrong one is caught when its error's norm in some block is well above lambda times the tolerance's
  (docs/timing.md measures both);
* the values at `PICKS` secret positions of every projected tensor of every call (drawn from the same
  late seed) must each be within the tolerance, as in the trials: this resolves what the aggregate bound
  cannot, an error just over the tolerance on many elements of one call (docs/timing.md, "Resolution").

The candidate's payload is untrusted: anything malformed in it is a forgery (ChannelError).
`checks` are the step's comparison checks (pipeline.checks_for: the task's tolerance rule at this dtype
and size, per output path), the same the element-wise verification uses; the reference's side of a
projected fingerprint carries the bound terms computed with them.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from pkb_env.contract import Check, Tolerance
from pkb_env.wire.channel import ChannelError
from pkb_env.ranks.fingerprints import MULTIPLIERS, PICKS, PROJECTIONS
from pkb_env.judge.compare import scalar_close, compare_outputs
from pkb_env.record import Mismatch

DELTA = 1e-15
LAMBDA = math.sqrt(2 * math.log(2 / DELTA))
UNIT_ROUNDOFF = 2.0 ** -53
MAX_REPORTED = 10  # differences kept per burst and rank (the record carries them; the feedback shows five)


def bound(t2: np.ndarray, a_expected: np.ndarray, a_got: np.ndarray, block: int) -> np.ndarray:
    """Per block: how far a right answer's projection may be from the reference's (module docstring)."""
    gamma = block * UNIT_ROUNDOFF / (1 - block * UNIT_ROUNDOFF)
    return LAMBDA * np.sqrt(t2) * (1 + 1e-9) + 1.01 * gamma * (a_expected + a_got)


def compare_burst(expected: dict, got: dict, checks: dict[str, Check], burst: int, rank: int,
                  arguments: dict[str, str] | None = None) -> list[Mismatch]:
    """Every difference between rank `rank`'s fingerprints of burst `burst` and the reference's, as reported
    (`differences`, then `reported`)."""
    return reported(differences(expected, got, checks, burst, rank, arguments), burst, rank)


def differences(expected: dict, got: dict, checks: dict[str, Check], burst: int, rank: int,
                arguments: dict[str, str] | None = None) -> list[tuple[int, Mismatch]]:
    """(call, difference) for every difference between rank `rank`'s fingerprints of burst `burst` and the
    reference's: which calls failed, for the judge (judge/timed_causes.py), and what, for the agent.

    `arguments`: the arguments updated in place (argument path -> the path of its result, `updated['x']`,
    TaskSpec.inplace_arguments): their final values are compared by their result's check and named by it;
    any other argument that differs from the reference's after the call was modified by it."""
    calls = len(expected["outputs"]["form"])
    _check_form(got, calls)
    arguments = arguments or {}
    out: list[tuple[int, Mismatch]] = []
    for call, message in got["problems"]:
        out.append((call, Mismatch(timed_label(burst, call), rank, "output", message)))
    out += _compare_part(expected["outputs"], got["outputs"], checks, burst, rank, "output", calls)
    inplace = {argument: checks[result] for argument, result in arguments.items()}
    for call, m in _compare_part(expected["inputs"], got["inputs"], inplace, burst, rank, "argument", calls):
        result = next((r for a, r in arguments.items() if m.path == a or m.path.startswith(a + "[")), None)
        if result is not None:
            m.path, m.message = result, f"{m.message} (the state updated in place)"
        else:
            m.message = f"the call modified {m.path} (inputs must be left unchanged; copy before working in place)"
        out.append((call, m))
    for key, exp_value in expected["samples"].items():
        if key not in got["samples"]:
            raise ChannelError(f"the sampled output of call {key} is missing")
        call = int(key)
        out += [(call, m) for m in compare_outputs(exp_value, got["samples"][key], checks, timed_label(burst, call),
                                                   rank)]
    return out


def reported(found: list[tuple[int, Mismatch]], burst: int, rank: int) -> list[Mismatch]:
    """The differences of one burst and rank as the record carries them: the first MAX_REPORTED, then a count."""
    out = [m for _, m in found]
    if len(out) > MAX_REPORTED:
        rest = len(out) - MAX_REPORTED
        out = out[:MAX_REPORTED] + [Mismatch(f"burst {burst}", rank, "output", f"... and {rest} more differences "
                                             f"in timed calls of this burst")]
    return out


def timed_label(burst: int, call: int) -> str:
    """What the feedback calls a timed call."""
    return f"timed call {call} of burst {burst}"


def _compare_part(expected: dict, got: dict, checks: dict[str, Check], burst: int, rank: int, root: str,
                  calls: int) -> list[tuple[int, Mismatch]]:
    """The structure of every call (once per distinct pair of forms), then every tensor's fingerprints,
    over all the calls a (reference group, candidate group) pair holds at once; in call order."""
    found: list[tuple[int, int, Mismatch]] = []  # (call, the path's place in the call, the difference)
    structures: dict[tuple[int, int], list[tuple[str, str]]] = {}
    matched: dict[int, list[int]] = {}           # reference form -> calls whose structure matched
    for call, pair in enumerate(zip(expected["form"].tolist(), got["form"].tolist())):
        if pair not in structures:
            try:
                structures[pair] = _structure(expected["forms"][pair[0]], got["forms"][pair[1]], root, checks)
            except (TypeError, KeyError, IndexError, AttributeError, ValueError):
                raise ChannelError("a fingerprint payload that is not of the judge's form") from None
        problems = structures[pair]
        found += [(call, place, Mismatch(timed_label(burst, call), rank, path, text))
                  for place, (path, text) in enumerate(problems)]
        if not problems:
            matched.setdefault(pair[0], []).append(call)
    exp_at, got_at = _locations(expected["groups"], calls), _locations(got["groups"], calls)
    nowhere = (np.full(calls, -1), np.full(calls, -1))
    for form, members in matched.items():
        rows = np.array(members)
        for place, path in enumerate(_tensor_paths(expected["forms"][form], root)):
            e_group, e_row = (a[rows] for a in exp_at[path])
            g_group, g_row = (a[rows] for a in got_at.get(path, nowhere))
            if (g_group < 0).any():
                raise ChannelError(f"no fingerprint of {path} of call {members[int(np.argmax(g_group < 0))]}")
            for e_index, g_index in set(zip(e_group.tolist(), g_group.tolist())):
                pick = (e_group == e_index) & (g_group == g_index)
                texts = _differs(expected["groups"][e_index], e_row[pick], got["groups"][g_index], g_row[pick],
                                 _tolerance(path, checks))
                for call, text in zip(rows[pick].tolist(), texts):
                    if text:
                        found.append((call, place, Mismatch(timed_label(burst, call), rank, path, text)))
    found.sort(key=lambda item: item[:2])
    return [(call, m) for call, _, m in found]


def _locations(groups: list[dict], calls: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per path: for every call, the group holding its fingerprint and the row in it (-1: none). A call
    fingerprinted twice under one path is a forgery (an honest rank puts each tensor in one group)."""
    at: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for index, g in enumerate(groups):
        group, row = at.setdefault(g["path"], (np.full(calls, -1), np.full(calls, -1)))
        members = g["calls"].numpy()
        if (group[members] >= 0).any() or len(np.unique(members)) != len(members):
            raise ChannelError(f"a call fingerprinted twice under {g['path']}")
        group[members] = index
        row[members] = np.arange(len(members))
    return at


EXACT_DIFFERS = "the values differ from the reference's (exact fingerprint)"
NON_FINITE_DIFFERS = ("NaN or infinity where the reference has none, or the reverse (fingerprint of non-finite "
                      "values)")


def _differs(exp: dict, e: np.ndarray, got: dict, g: np.ndarray, tol: Tolerance) -> list[str | None]:
    """Per row pair (exp's rows `e`, got's rows `g`): why got's fingerprint is not a right answer's, or None.
    `tol`: the output's tolerance, for the values at the secret positions (compared as trials are).

    In NumPy: these arrays are small (calls x blocks). The same operations in torch took milliseconds
    each inside a GPU step, far more than in a quiet process (the cause was not pinned down), where NumPy's
    take microseconds (docs/measurements/2026-12-01-timing-h200.md, "What a warm step's time went to")."""
    if exp["kind"] != got["kind"] or exp["n"] != got["n"]:
        raise ChannelError("a fingerprint of another kind than the reference's")
    codes_differ = ~(exp["e"].numpy()[e] == got["e"].numpy()[g]).all(-1)
    if exp["kind"] == "exact":
        return [EXACT_DIFFERS if bad else None for bad in codes_differ.tolist()]
    if got.get("block") != exp["block"]:
        raise ChannelError("a fingerprint cut into other blocks than the reference's")
    limit = bound(exp["t2"].numpy()[e], exp["a"].numpy()[e], got["a"].numpy()[g], exp["block"])  # rows x blocks
    with np.errstate(all="ignore"):  # inf and NaN are answers to report, not errors
        gap = np.abs(got["p"].numpy()[g] - exp["p"].numpy()[e])  # rows x projections x blocks
        # A block with no room (limit 0: all its values non-finite, or zero under a rule without atol) must
        # match exactly: 0/0 is no difference there, anything else over 0 is one.
        excess = np.where(gap == 0, 0.0, gap / limit[:, None, :])
    worst = excess.reshape(len(e), -1).max(1, initial=0.0)  # NaN propagates: it counts as a difference
    bad, first = _picked(exp["x"].numpy()[e], got["x"].numpy()[g], tol)
    texts: list[str | None] = []
    for codes, value, n_bad, where in zip(codes_differ.tolist(), worst.tolist(), bad.tolist(), first):
        if codes:
            texts.append(NON_FINITE_DIFFERS)
        elif n_bad:  # why some calls differ (data, or caching) is the verdict's to say: judge/timed_causes.py
            texts.append(f"{n_bad} of {exp['x'].shape[1]} elements at secret positions differ from the reference's "
                         f"beyond the tolerance (atol {tol.atol:g} + rtol {tol.rtol:g}; one: expected "
                         f"{where[0]:.6g}, got {where[1]:.6g}; every timed call is sampled so)")
        elif not value <= 1.0:
            texts.append(f"values differ from the reference's beyond the tolerance: a random projection of the "
                         f"difference is {value:.3g}x the most a right answer reaches (every timed call is "
                         f"fingerprinted)")
        else:
            texts.append(None)
    return texts


def _picked(e: np.ndarray, g: np.ndarray, tol: Tolerance) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Per row, how many values at the secret positions break the element-wise rule (compare.py's: NaN only
    where NaN, an infinity only where the same one), and one such pair (expected, got) to show."""
    with np.errstate(all="ignore"):
        finite = np.isfinite(e)
        ok = np.where(finite, np.isfinite(g) & (np.abs(g - e) <= tol.atol + tol.rtol * np.abs(e)),
                      (np.isnan(e) & np.isnan(g)) | (g == e))
    bad = (~ok).sum(1)
    first = [(float(row_e[~row_ok][0]), float(row_g[~row_ok][0])) if n else (0.0, 0.0)
             for row_e, row_g, row_ok, n in zip(e, g, ok, bad.tolist())]
    return bad, first


def _tensor_paths(skeleton: Any, path: str) -> list[str]:
    if not isinstance(skeleton, list):
        return []
    kind = skeleton[0]
    if kind == "tensor":
        return [path]
    if kind == "sequence":
        return [p for i, s in enumerate(skeleton[1]) for p in _tensor_paths(s, f"{path}[{i}]")]
    if kind == "dict":
        return [p for k, s in skeleton[1].items() for p in _tensor_paths(s, f"{path}[{k!r}]")]
    return []


def _tolerance(path: str, checks: dict[str, Check]) -> Tolerance:
    """The tolerance of the longest declared path `path` lies under (exact where none is declared)."""
    for key in sorted(checks, key=len, reverse=True):
        if path == key or path.startswith(key + "["):
            return checks[key].tolerance
    return Tolerance(0.0, 0.0, "not declared: exact")


def _structure(exp: Any, got: Any, path: str, checks: dict[str, Check]) -> list[tuple[str, str]]:
    """Where the structure of `got` differs from `expected` (containers, keys, dtypes, shapes, scalars)."""
    if exp is None or got is None:
        return [] if exp is got else [(path, f"expected {_describe(exp)}, got {_describe(got)}")]
    kind = exp[0]
    numeric = kind in ("float", "complex") and isinstance(got, list) and len(got) == 2 and got[0] in ("int", "float")
    if not isinstance(got, list) or not got or (got[0] != kind and not numeric):
        return [(path, f"expected {_describe(exp)}, got {_describe(got)}")]
    if numeric and kind == "complex":
        got = ["complex", got[1], 0.0]
    if kind == "tensor":
        return [] if got[1:] == exp[1:] else [(path, f"expected {_describe(exp)}, got {_describe(got)}")]
    if kind == "sequence":
        if len(got[1]) != len(exp[1]):
            return [(path, f"expected a sequence of length {len(exp[1])}, got one of length {len(got[1])}")]
        return [p for i, (e, g) in enumerate(zip(exp[1], got[1])) for p in _structure(e, g, f"{path}[{i}]", checks)]
    if kind == "dict":
        if set(got[1]) != set(exp[1]):
            return [(path, f"dict keys differ: expected {sorted(exp[1])[:8]}, got {sorted(got[1])[:8]}")]
        return [p for k in exp[1] for p in _structure(exp[1][k], got[1][k], f"{path}[{k!r}]", checks)]
    if kind in ("float", "complex"):
        tol = _tolerance(path, checks)
        if len(got) == len(exp) and all(_close(e, g, tol) for e, g in zip(exp[1:], got[1:])):
            return []
    elif got[1:] == exp[1:]:
        return []
    return [(path, f"expected {_describe(exp)}, got {_describe(got)}")]


def _close(e: float, g: Any, tol: Tolerance) -> bool:
    return type(g) in (int, float) and scalar_close(e, g, tol)


def _describe(skeleton: Any) -> str:
    if skeleton is None:
        return "None"
    if not isinstance(skeleton, list) or not skeleton:
        return "something else"
    kind = skeleton[0]
    if kind == "tensor" and len(skeleton) == 3:
        return f"a {skeleton[1]} tensor of shape {skeleton[2]}"
    if kind in ("sequence", "dict"):
        return f"a {kind}"
    return f"{kind} {str(skeleton[1:])[:40]}"


def _check_form(data: Any, calls: int) -> None:
    """A candidate's fingerprint payload must have the judge's form; anything else is a forgery."""
    try:
        ok = (isinstance(data, dict) and set(data) == {"outputs", "inputs", "problems", "samples"}
              and isinstance(data["samples"], dict) and isinstance(data["problems"], list)
              and all(isinstance(p, list) and len(p) == 2 and type(p[0]) is int and 0 <= p[0] < calls
                      and isinstance(p[1], str) for p in data["problems"]))
        for part in ("outputs", "inputs"):
            ok = ok and _part_ok(data[part], calls)
    except (KeyError, TypeError, IndexError, AttributeError):
        ok = False
    if not ok:
        raise ChannelError("a fingerprint payload that is not of the judge's form")


def _part_ok(part: Any, calls: int) -> bool:
    if not (isinstance(part, dict) and isinstance(part.get("forms"), list) and isinstance(part.get("groups"), list)
            and _tensor_ok(part.get("form"), torch.int64, (calls,)) and _indices_ok(part["form"], len(part["forms"]))):
        return False
    for g in part["groups"]:
        rows = g["calls"]
        if not (isinstance(g["path"], str) and _tensor_ok(rows, torch.int64) and rows.dim() == 1
                and _indices_ok(rows, calls) and g["kind"] in ("exact", "projected")
                and type(g["n"]) is int):
            return False
        if not _tensor_ok(g["e"], torch.int64, (len(rows), MULTIPLIERS)):
            return False
        if g["kind"] == "projected":
            blocks = g["p"].shape[-1] if isinstance(g.get("p"), torch.Tensor) else -1
            if not (type(g.get("block")) is int and _tensor_ok(g["p"], torch.float64, (len(rows), PROJECTIONS, blocks))
                    and _tensor_ok(g["a"], torch.float64, (len(rows), blocks))
                    and _tensor_ok(g.get("x"), torch.float64, (len(rows), min(g["n"], PICKS)))):
                return False
    return True


def _indices_ok(t: torch.Tensor, size: int) -> bool:
    values = t.numpy()
    return values.size == 0 or (int(values.min()) >= 0 and int(values.max()) < size)


def _tensor_ok(t: Any, dtype: torch.dtype, shape: tuple[int, ...] | None = None) -> bool:
    """A plain dense tensor of `dtype` (and `shape`): what the comparison may read as an array."""
    return (type(t) is torch.Tensor and t.dtype == dtype and t.layout == torch.strided and not t.requires_grad
            and (shape is None or tuple(t.shape) == shape))
