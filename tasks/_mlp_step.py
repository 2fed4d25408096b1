"""What the data-parallel and sharded training steps of a two-layer MLP share (PKB 40 DDP, 41 ZeRO-1, 42 ZeRO-2,
47 FSDP): the model, its sizes, how the state is drawn, the float64 golden of the step and its tolerance.

The model: out = silu(X W1^T + b1) W2^T + b2 with W1 (H, D), b1 (H,), W2 (O, H), b2 (O,), the loss the mean
squared error against y over the global batch of N rows, each rank holding N/W rows (its data shard). The flat
parameters are W1, b1, W2, b2 flattened and concatenated in that order: P = H*D + H + O*H + O values, sharded
over the ranks in rank order by the ZeRO and FSDP tasks (P/W each).

Precision: parameters, Adam's moments and the forward and backward in fp32 whatever the task dtype; the data
(X, y) in the task dtype. In bf16 a 1e-3 step is below the weights' resolution, so bf16 state would hide the
update and any error in it; and Adam's normalisation carries a bf16 gradient's error into the update at
the size of the bugs to catch. SiLU, not PKB's ReLU: ReLU's kink makes the gradient jump where a
pre-activation is within rounding of zero (1 of 36 fp32 calls measured at bench), moving a whole row's share
of a weight's gradient, which Adam carries into the update at up to ~4000x the fp32 tolerance.

State drawn as after many steps, at the scale the step sees: weights normal with std 1/sqrt(fan-in) (the
default init's scale), the first moments normal and the second moments log-normal at the scale of the
gradients (GRAD, from the sizes), and the step number drawn per call in [1, 1000], so the gradient, both
moments and the bias corrections all move the result on every call.

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

import math

import torch

from pkb_env.contract import Const, Custom, InPlace, Integers, Preset, Relative, Scalar, Sum

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 0.01
SHAPES = {"W1": ("H", "D"), "b1": ("H",), "W2": ("O", "H"), "b2": ("O",)}
NAMES = tuple(SHAPES)
P = "H * D + H + O * H + O"      # the flat parameters' length
G = "(1.5 / (sqrt(N) * O))"     # the gradients' RMS (grad_scale)


def presets() -> dict[str, Preset]:
    """`tiny` (P = 280: shards of 140, 70 and 35 at W = 2, 4, 8) and `bench` (PKB's sizes: a batch of 1024
    rows, 256 -> 512 -> 256, P = 262912). A fresh dict per call."""
    return {"tiny": Preset({"N": 32, "D": 8, "H": 16, "O": 8}, "float32", "CPU ranks, milliseconds"),
            "bench": Preset({"N": 1024, "D": 256, "H": 512, "O": 256}, "bfloat16",
                            "PKB's sizes: 1024 rows of 256 features, hidden 512, 256 outputs (262912 parameters)")}


def grad_scale(env) -> float:
    """The RMS of the loss's gradient entries, about 1.5 / (sqrt(N) * O): the mean over N*O squared errors
    puts 2/(N*O) on each output, and a weight's gradient sums N rows of random sign."""
    return 1.5 / (math.sqrt(env["N"]) * env["O"])


def _weights(gen, shape, dtype, env):
    """Normal with std 1/sqrt(fan-in): D for W1 and b1, H for W2 and b2 (the fan-in is the last dim of a
    weight; a bias takes its layer's, read from its size)."""
    fan_in = shape[-1] if len(shape) == 2 else (env["D"] if shape[0] == env["H"] else env["H"])
    return (torch.randn(shape, generator=gen, device=gen.device) / math.sqrt(fan_in)).to(dtype)


def _first_moment(gen, shape, dtype, env):
    return (torch.randn(shape, generator=gen, device=gen.device) * (0.5 * grad_scale(env))).to(dtype)


def _second_moment(gen, shape, dtype, env):
    noise = torch.randn(shape, generator=gen, device=gen.device)
    return (torch.exp(noise * 0.5) * grad_scale(env) ** 2).to(dtype)


WEIGHTS = Custom(_weights, "normal with std 1/sqrt(fan-in) (D for W1 and b1, H for W2 and b2)")
FIRST_MOMENT = Custom(_first_moment, "normal with std G/2, G = 1.5/(sqrt(N)*O) the gradients' RMS "
                                     "(as after many steps)")
SECOND_MOMENT = Custom(_second_moment, "G^2 * exp(N(0,1)/2), G = 1.5/(sqrt(N)*O) the gradients' RMS "
                                       "(as after many steps)")


def hyper(weight_decay: bool = False) -> tuple:
    """lr, beta1, beta2, eps (and weight_decay), then the step number drawn per call."""
    consts = (Const("lr", LR, doc="learning rate"), Const("beta1", BETA1, doc="first-moment decay"),
              Const("beta2", BETA2, doc="second-moment decay"), Const("eps", EPS, doc="added to sqrt(v_hat)"))
    if weight_decay:
        consts += (Const("weight_decay", WEIGHT_DECAY, doc="decoupled weight decay (AdamW)"),)
    return consts + (Scalar("step", Integers(1, 1001),
                            doc="the step number, counted from 1, the same on every rank (sets the bias corrections)"),)


# -- the golden ----------------------------------------------------------------------------------------
def full_gradient(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of the mean squared error over the whole batch, float64, flattened in parameter order."""
    ps = [p.double().requires_grad_(True) for p in params]
    h = torch.nn.functional.silu(x.double() @ ps[0].T + ps[1])
    out = h @ ps[2].T + ps[3]
    loss = ((out - y.double()) ** 2).mean()
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, ps)])


def adam(param, grad, m, v, first, decay: float = 0.0):
    """One Adam(W) step in float64, bias correction included: (new param, new m, new v). `first` holds lr,
    beta1, beta2, eps and step; `decay` is AdamW's decoupled weight decay."""
    lr, b1, b2, eps, step = (first[k] for k in ("lr", "beta1", "beta2", "eps", "step"))
    m = b1 * m.double() + (1 - b1) * grad
    v = b2 * v.double() + (1 - b2) * grad * grad
    m_hat = m / (1 - math.pow(b1, step))
    v_hat = v / (1 - math.pow(b2, step))
    new = param.double() - lr * m_hat / (v_hat.sqrt() + eps) - lr * decay * param.double()
    return new, m, v


def split(flat: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The flat vector cut into tensors shaped as `like`'s, in its order."""
    out, offset = {}, 0
    for name, t in like.items():
        out[name] = flat[offset:offset + t.numel()].reshape(t.shape)
        offset += t.numel()
    return out


# -- tolerance and cost --------------------------------------------------------------------------------
# The parameters move by lr * m_hat / (sqrt(v_hat) + eps), at most ~1e-2, after ~8 fp32 roundings however
# the update is arranged, then the subtraction rounds once more (Relative(1): one fp32 step at the weight);
# the gradient's own error (~1e-6 of G in fp32) moves the update by far less. A forgotten bias correction
# moves it by a tenth or more of lr, ~1e-4: far outside. Margins measured (PKB 40-42, 47, 48):
# docs/measurements/2026-12-03-tolerance-margins-cpu.md.
def param_tolerance():
    return (Sum(8, "0.01", "float32", what="the Adam update's fp32 roundings")
            + Relative(1, "float32", what="the weights minus the update, rounded once more"))


def grad_tolerance():
    """The averaged gradient: fp32 GEMMs over the batch's rows (N terms of random sign at the gradients'
    scale G, summed in fp32 however they are split over the ranks) and the average over the W ranks."""
    return (Sum("4 * sqrt(N)", G, "float32", what="the batch's rows summed in fp32")
            + Sum("W", G, "float32", what="the average over the ranks"))


def moment_tolerance():
    """exp_avg = beta1 m + (1 - beta1) g: a tenth of the gradient's error, then two fp32 roundings at the
    terms' scale (they may cancel: an absolute term) and at the result's."""
    return (Sum("4 * sqrt(N)", f"0.1 * {G}", "float32", what="a tenth of the gradient's error")
            + Sum(3, G, "float32", what="beta1 m + (1 - beta1) g rounded in fp32 (the terms may cancel)")
            + Relative(2, "float32", what="the moment's fp32 roundings"))


def second_moment_tolerance():
    """exp_avg_sq = beta2 v + (1 - beta2) g^2: 2 (1 - beta2) g times the gradient's error, then fp32 roundings."""
    return (Sum("4 * sqrt(N)", f"0.002 * {G} * {G}", "float32", what="the gradient's error through g^2")
            + Relative(8, "float32", what="the moment's fp32 roundings (worst of ~10^6 values: ~4u)"))


def step_flops(c) -> float:
    """A forward and a backward over N/W rows: 3 GEMM pairs, 6 * (N/W) * H * (D + O)."""
    return 6 * c["N"] / c["W"] * c["H"] * (c["D"] + c["O"])


def flat_params(c) -> int:
    return c["H"] * c["D"] + c["H"] + c["O"] * c["H"] + c["O"]


# Departures every task of this family shares (ddp, zero1, zero2, fsdp_step_e2e): why its state is fp32 and its
# activation SiLU, each measured.
MLP_STATE_DEPARTURES = (
    "parameters, moments and the forward and backward are fp32 whatever the task dtype (the data, X and "
    "y, has it): in bf16 a 1e-3 step is below the weights' resolution, so PKB's bf16 state hides the "
    "update and any error in it, and Adam's normalisation carries a bf16 gradient's error (measured with "
    "relu: up to ~1.5x the gradients' RMS at tiny) into the update at the size of the bugs to catch",
    "SiLU instead of PKB's ReLU: ReLU's kink makes the gradient jump where a pre-activation is within "
    "rounding of zero, which happened in 1 of 36 fp32 calls measured at bench and moves a whole row's "
    "share of a weight's gradient; Adam carries it into the update at up to ~4000x the fp32 tolerance "
    "(measured), so two correct fp32 steps could disagree",
)


def sharded_adam_state() -> tuple:
    """The in-place results of ZeRO-1 and ZeRO-2 (41, 42): the replicated parameters, bit-identical on every
    rank, and this rank's shard of Adam's moments."""
    return (*(InPlace(name, identical=True, tolerance=param_tolerance(),
                      doc=f"{name} after the step, the same bits on every rank") for name in NAMES),
            InPlace("exp_avg_part", tolerance=moment_tolerance(), doc="this shard's first moments after the step"),
            InPlace("exp_avg_sq_part", tolerance=second_moment_tolerance(),
                    doc="this shard's second moments after the step"))
