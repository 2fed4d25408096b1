"""What the two FP8 delayed-scaling tasks (PKB 52, 53) share: the amax history, its inputs and outputs, the
quantisation as the statement defines it, and the history's rule.

Transformer Engine's delayed scaling: a tensor is cast to float8_e4m3fn with a scale taken from the
largest of its recent absolute maxima (an amax history, newest last), so one outlier step does not
overflow the cast and one quiet step does not waste its range. Both tasks roll the history by one, store
this call's amax (rounded to bf16) as the newest entry, scale by max(history) / 448, and move the values
as fp8; the updated history is returned beside the data.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from pkb_env.contract import Custom, Exact, Output, PerRank, Tensor

FP8_MAX = 448.0      # float8_e4m3fn's largest finite value
HISTORY = 16         # entries of the amax history (PKB's length)
SCALE_FLOOR = 1e-12  # the smallest max(history) the scale is taken from


def past_amaxes(reads: str) -> Custom:
    """Past steps' amaxes of the same tensor: this call's amax times exp(N(-0.35, 0.2)) per entry, so the
    newest amax is above every past one in about half the calls and below the largest in the others
    (PKB fills 1e-8, which makes the scale this call's amax alone: the history never matters)."""
    def draw(gen, shape, dtype, env, given):
        amax = given.values[reads].abs().max().float()
        noise = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32)
        return (amax * torch.exp(noise * 0.2 - 0.35)).to(dtype)
    return Custom(draw, f"past amaxes of {reads}: its current max|x| times exp(N(-0.35, 0.2)) per entry, "
                        f"newest last", reads=(reads,))


def history_input(reads: str) -> Tensor:
    return Tensor("amax_history", (HISTORY,), dtype="bfloat16", dist=past_amaxes(reads),
                  doc=f"this rank's past amaxes of {reads}, oldest first")


HISTORY_OUTPUT = Output(
    "updated_history", (HISTORY,), dtype="bfloat16", layout=PerRank(),
    tolerance=Exact("the history rolled by one with max|x| (an exact maximum) rounded to bf16 as its newest "
                    "entry: one right answer"),
    doc="amax_history rolled one place to the front, this call's max|x| as the last entry")


def delayed_scaling(x: torch.Tensor, history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The statement's values of one rank's tensor, as float64 (q * s exactly: the fp8 codes and the fp32
    scale computed as defined, in fp32), and its updated history."""
    updated = history.roll(-1)
    updated[-1] = x.abs().max()
    scale = updated.max().float().clamp(min=SCALE_FLOOR) / FP8_MAX
    codes = (x.float() / scale).to(torch.float8_e4m3fn)
    return codes.double() * scale.double(), updated


STATEMENT = ("The amax history is rolled one place to the front (torch.roll(h, -1)) and its last entry set to "
             "max(abs(x)) of this call's tensor, rounded to bf16; the scale is s = max(max(history), 1e-12) / 448 "
             "in fp32; each value is cast as q = float8_e4m3fn(x / s) (the fp32 quotient, round to nearest "
             "even) and stands for q * s. The codes are part of the statement: compute them exactly as "
             "defined (a reciprocal multiply or an approximate division changes some codes by one step).")

DEPARTURES = (
    "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
    "can reproduce to make its peers' tensors without communicating)",
    "the amax history holds past amaxes near this call's (its amax times exp(N(-0.35, 0.2))) instead of "
    "PKB's constant 1e-8, under which max(history) is always this call's amax and a candidate ignoring the "
    "history entirely (or not updating it) gets the same values; now the history sets the scale in about "
    "half the calls",
    "the updated history is compared exactly (one right answer) and the values at a tolerance for their "
    "roundings; the golden computes the fp8 codes as defined, in fp32, then the rest in float64",
    "a `large` preset where the bytes moved set the time (PKB's 4096 values a rank are latency-bound)",
    "edge cases, each in every step's trials: a past amax above this call's (the history sets the scale), the "
    "oldest amax the largest (the roll drops it), and values whose fp8 codes the stated division decides",
)


# -- edge cases and clauses: the history sets the scale; the oldest entry is dropped; codes on fp8 boundaries
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
PEAK = 2.0          # an edge case's history peak, over this call's amax
QUIET = 0.75        # ... and the other entries' ceiling under it
LEVEL = 2.0 ** -6   # the boundary tensor's amax in [2, 4): a bf16 grid value in [128, 256), times a power of two


def _quiet(history: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    return torch.minimum(history.float(), QUIET * amax.float()).to(history.dtype)


def _peak(position: int):
    """The history's entry `position` (0: the oldest, dropped by the roll) set to PEAK times this call's amax,
    the other entries under it: the scale comes from that entry (or, for the oldest, must not)."""
    def rewrite(history, draw):
        amax = draw.given[next(iter(draw.given))].abs().max()
        history = _quiet(history, amax)
        history[position if position >= 0 else
                 1 + int(torch.randint(HISTORY - 1, (), generator=draw.gen, device=draw.gen.device))] = PEAK * amax
        return history
    return rewrite


def _codes(x: torch.Tensor, scale: torch.Tensor, reciprocal: torch.Tensor | None = None) -> torch.Tensor:
    """fp8 codes (as fp32) of the fp32 quotient x / scale, or of x * reciprocal."""
    quotient = x.float() / scale if reciprocal is None else x.float() * reciprocal
    return quotient.to(torch.float8_e4m3fn).float()


@lru_cache(maxsize=None)
def _boundary_block(dtype: torch.dtype) -> tuple[float, tuple[float, ...]]:
    """An amax (a bf16 grid value in [128, 256), so that the history keeps it exactly) and the values of
    `dtype`'s grid below it whose fp8 code the stated division x / s rounds otherwise than x * (448 / amax)
    does (quotients within an fp32 ulp of an fp8 midpoint): the amax with the most. Searched once per dtype."""
    bits = BITS[dtype]
    amax = torch.arange(*(int(torch.tensor(v, dtype=torch.bfloat16).view(torch.int16)) for v in (128.0, 256.0)),
                        dtype=torch.int16).view(torch.bfloat16).float()
    grid = torch.arange(0, 256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[torch.isfinite(grid) & (grid >= 0)].unique()
    middles = (grid[1:] + grid[:-1]) / 2                                   # fp8 rounding midpoints in [0, 448]
    scale = amax / FP8_MAX
    near = (middles[None, :] * scale[:, None]).to(dtype)
    x = (near.view(bits)[..., None] + torch.arange(-3, 4, dtype=bits)).view(dtype).float().flatten(1)
    stated = _codes(x, scale[:, None])
    other = _codes(x, None, (FP8_MAX / amax)[:, None])
    differs = (stated != other) & (x < amax[:, None])
    best = int(differs.sum(dim=1).argmax())
    return float(amax[best]), tuple(sorted(set(x[best][differs[best]].tolist())))


def boundary_values(x, draw):
    """On the rank it lands on, x's amax set to a bf16 grid value A (in [2, 4)) and some of its values to
    ones whose fp8 code the division x / s (s = A / 448) rounds otherwise than x * (448 / A) (the history is
    kept under A by `boundary_history`, so s comes from this call's amax)."""
    signs = torch.randint(0, 2, x.shape, generator=draw.gen, device=draw.gen.device).cpu() * 2 - 1
    if not draw.here:
        return x
    amax, values = _boundary_block(x.dtype)
    out = (x.float() * 0.25).clamp(-amax * LEVEL / 2, amax * LEVEL / 2)   # the rest well under the amax
    out[0] = amax * LEVEL
    chosen = torch.tensor(values[:x.numel() - 1], dtype=torch.float32) * LEVEL
    out[1:1 + len(chosen)] = chosen * signs[1:1 + len(chosen)].to(out.device)
    return out.to(x.dtype)


def boundary_history(history, draw):
    if not draw.here:
        return history
    return _quiet(history, draw.given[next(iter(draw.given))].abs().max())


def edges(name: str) -> tuple:
    """history_peak, oldest_peak and fp8_boundary for the task whose quantised tensor is input `name`."""
    from pkb_env.contract import Edge

    return (Edge("history_peak", "amax_history", _peak(-1), "a past amax above this call's", everywhere=True),
            Edge("oldest_peak", "amax_history", _peak(0), "the oldest amax, which the roll drops, the largest",
                 everywhere=True),
            Edge("fp8_boundary", name, boundary_values, "values whose fp8 codes the stated division decides",
                 also=(("amax_history", boundary_history),)))


def _scales(args: dict, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One rank's updated history and its scale s, as the statement computes them."""
    history = args["amax_history"].roll(-1)
    history[-1] = args[name].abs().max()
    return history, history.max().float().clamp(min=SCALE_FLOOR) / FP8_MAX


def clauses(name: str) -> tuple:
    from pkb_env.contract import Clause

    def from_history(trial):
        return any(bool(a["amax_history"][1:].float().max() > a[name].abs().max().to(torch.bfloat16).float())
                   for a in trial.inputs)

    def oldest_dropped(trial):
        return any(bool(a["amax_history"][0] > _scales(a, name)[0].max()) for a in trial.inputs)

    def divided(trial):
        for a in trial.inputs:
            history, scale = _scales(a, name)
            if bool((_codes(a[name], scale) != _codes(a[name], None, FP8_MAX / history.max().float())).any()):
                return True
        return False

    return (Clause("history_scale", "s = max(history) / 448 after the update: a past amax above this call's sets "
                   "the scale", from_history, "edge case history_peak (half the plain draws too)",
                   edge="history_peak"),
            Clause("history_roll", "the history rolled one place: the oldest entry, the largest, no longer "
                   "counts", oldest_dropped, "edge case oldest_peak", edge="oldest_peak"),
            Clause("fp32_division", "q = float8_e4m3fn(x / s), the fp32 quotient: a value whose quotient lies "
                   "within an ulp of an fp8 midpoint, where x * (448 / max(history)) rounds the other way",
                   divided, "edge case fp8_boundary (an amax whose grid holds such values, searched per dtype)",
                   edge="fp8_boundary"))
