"""What the convolution tasks (PKB 71, 76, 87) share, declared once: weights drawn at a trained layer's scale.

PKB draws convolution weights as standard normals, so a 3x3 convolution over 1280 channels has outputs of
RMS sqrt(9 * 1280) = 107, beside which a unit bias sits below bf16's rounding step (0.5 at 107): a
candidate that drops the bias passes. Weights of std 1/sqrt(fan_in), the scale of a Kaiming-initialised or
trained layer, keep every output term of unit order at every width, so the tolerance can be tight enough
to see a missing bias or a wrong halo row.

A plain module, not a task package (`pkb_env.task.task_names()` skips names starting with an underscore).
"""
from __future__ import annotations

import torch

from pkb_env.contract import Custom, Expr, Rounded


def fan_in_normal(fan_in: str) -> Custom:
    """Normal weights of std 1/sqrt(fan_in), `fan_in` a size expression over the preset's dims ("9 * C")."""
    size = Expr(fan_in)

    def draw(gen, shape, dtype, env):
        out = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32)
        return out.mul_(size.real(env) ** -0.5).to(dtype)

    return Custom(draw, f"normal, std 1/sqrt({fan_in}) (the fan-in)", kinds=frozenset({"float"}))


BIAS_ROUNDING = Rounded(1, 1, what="the convolution rounded to the dtype before the bias is added")
"""A convolution may round its unit-RMS result to the dtype before a separate bias add: one more rounding."""
