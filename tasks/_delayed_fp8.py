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
)
