"""grad_acc_loss: the token-weighted loss of gradient accumulation over data-parallel ranks (PKB 23).

With micro-batches of uneven valid-token counts, averaging each rank's mean loss weighs a token on a
short micro-batch more than one on a long one; the fix (Hugging Face's and VeOmni's gradient-accumulation
loss) sums loss * tokens over ranks and divides by the step's global count of valid tokens, and scales
each rank's gradient by its share. One scalar crosses ranks: latency rules; the lever is one small
all-reduce with nothing on the host around it (PKB's `.item()` on the count is a host synchronisation).

Counts differ per rank and per call, the global count covers every micro-batch of the step (so it
exceeds the sum of this call's counts), and an edge case gives one rank no valid token, whose mean loss
is not finite: it must contribute nothing, as the statement says.
"""
import torch

from pkb_env.contract import (Clause, Comm, Compute, Cost, Custom, Edge, Integers, Normal, Output, PerRank, Positive,
                              Preset, Relative, Replicated, Sum, TaskSpec, Tensor)
from pkb_env.tasks._clauses import sixteen_bit


def _mean_loss(gen, shape, dtype, env, given):
    """A positive mean loss, 2 exp(N(0,1)/2); not finite where the rank has no valid token (a mean over none).
    That loss is +inf rather than NaN: the judge tells an input changed by the call with torch.equal, which
    never holds for NaN; inf * 0 is NaN all the same, so a rank that multiplies without the guard is caught."""
    value = torch.exp(torch.randn(shape, generator=gen, dtype=torch.float32, device=gen.device) * 0.5) * 2.0
    return torch.where(given.values["local_valid_tokens"] == 0, float("inf"), value).to(dtype)


def no_valid_tokens(value, draw):
    """One rank's count set to 0 (its loss, drawn after, is not finite)."""
    return torch.zeros_like(value) if draw.here else value


def golden(inputs, world):
    """In float64: the token-weighted sum over ranks (ranks without tokens contribute 0), its quotient by the
    global count, and each rank's gradient; rounded once to fp32."""
    total = sum(args["loss"].double() * args["local_valid_tokens"].double()
                for args in inputs if int(args["local_valid_tokens"]) > 0)
    total = torch.as_tensor(total, dtype=torch.float64)
    out = []
    for args in inputs:
        count, glob = args["local_valid_tokens"].double(), args["global_valid_tokens"].double()
        grad = args["grad_normalized_loss"].double() * count / glob + args["grad_loss_sum"].double() * count
        out.append(((total / glob).float(), total.float(), grad.float()))
    return out


def cost(c):
    """Per rank: an all-reduce of one fp32 scalar; a handful of FLOPs; the five scalars read, three written."""
    return Cost(comm=(Comm("all_reduce", c.nbytes("loss_sum")),), compute=(Compute(8, "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="grad_acc_loss",
    title="Gradient-accumulation loss: token-weighted sum over ranks, normalised by the global count",
    description="Every rank holds loss (0-dim), the mean loss over its local_valid_tokens (int64, 0-dim) valid "
                "tokens of this micro-batch (not finite where the count is 0: such a rank contributes 0), and "
                "global_valid_tokens (int64, 0-dim, the same on every rank), the valid tokens of every rank over "
                "every micro-batch of the step. In fp32: loss_sum = sum over ranks of loss * local_valid_tokens "
                "and normalized_loss = loss_sum / global_valid_tokens, the same on every rank; and this rank's "
                "grad_loss = grad_normalized_loss * local_valid_tokens / global_valid_tokens + grad_loss_sum * "
                "local_valid_tokens. Every rank must return (normalized_loss, loss_sum, grad_loss), three 0-dim "
                "fp32 tensors.",
    family="data",
    parallelism="data parallel with gradient accumulation: a token-weighted loss summed over ranks",
    pkb_id=23,
    origin="VeOmni / Hugging Face transformers gradient-accumulation loss (loss * local tokens all-reduced, "
           "divided by the global token count)",
    inputs=(
        Tensor("loss", (), dist=Custom(_mean_loss, "positive, 2 exp(N(0,1)/2); +inf where the rank has no valid "
                                       "token", reads=("local_valid_tokens",)),
               doc="this rank's mean loss over its valid tokens"),
        Tensor("local_valid_tokens", (), dtype="int64", dist=Integers(1, "M * N + 1"),
               doc="this rank's valid tokens in this micro-batch"),
        Tensor("global_valid_tokens", (), dtype="int64", dist=Integers("W * M * N", "4 * W * M * N + 1"),
               layout=Replicated(), doc="every rank's valid tokens over every micro-batch of the step"),
        Tensor("grad_normalized_loss", (), layout=Replicated(), doc="the upstream gradient of normalized_loss"),
        Tensor("grad_loss_sum", (), layout=Replicated(), doc="the upstream gradient of loss_sum"),
    ),
    outputs=(
        Output("normalized_loss", (), dtype="float32", layout=Replicated(), doc="loss_sum / global_valid_tokens"),
        Output("loss_sum", (), dtype="float32", layout=Replicated(), doc="sum over ranks of loss * local tokens"),
        Output("grad_loss", (), dtype="float32", layout=PerRank(),
               tolerance=Relative(3, "float32", what="two products and a sum in fp32")
               + Sum(2, "M * N", "float32", what="two terms up to M N in magnitude, added in fp32"),
               doc="the gradient of this rank's loss"),
    ),
    golden=golden,
    cost=cost,
    # Every term of the sum is positive: each product and each of the W - 1 additions rounds once in fp32,
    # relative to a partial sum below the total.
    tolerance_rule=Relative("W + 1", "float32", what="W products and W - 1 additions of positive terms in fp32"),
    clauses=(Clause("no_valid_tokens", "a rank without valid tokens contributes 0 (its loss is not finite)",
                    lambda t: any(int(n) == 0 for n in t.each("local_valid_tokens")), "edge case no_valid_tokens",
                    edge="no_valid_tokens"),
             sixteen_bit("fp32_sums", "loss_sum and normalized_loss in fp32 from a 16-bit loss")),
    presets={
        "tiny": Preset({"M": 16, "N": 16}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's size: up to 1024 x 1024 valid tokens a rank"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    edges=(Edge("no_valid_tokens", "local_valid_tokens", no_valid_tokens,
                "no valid token: count 0, its mean loss infinite"),),
    departures=(
        "inputs come from secret per-trial, per-rank seeds, and the counts differ per rank and per call (PKB "
        "gives every rank M*N tokens and the global count W*M*N, so a loss normalised by the local count times W "
        "passes, and its upstream gradients are the constants 1 and 0)",
        "the global count covers every micro-batch of the step, so it exceeds the sum of this call's counts (a "
        "count all-reduced in the call is wrong)",
        "a rank without valid tokens is handled on the device (its non-finite loss contributes 0): PKB's "
        "`local_valid_tokens.item() == 0` is a host synchronisation; an edge case draws such a rank",
        "the loss is the task dtype but the products, the sum and the three outputs are fp32 (PKB computes them "
        "in the loss's dtype: a bf16 sum of W values up to 2^20 times a loss); the golden is float64",
        "the upstream gradients are the same on every rank (the loss is), drawn per call",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb, Ret  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import in_dtype  # noqa: E402

PKB = Pkb("grad_acc_loss",
          returns=tuple(Ret(n, to="float32", text="cast to float32: PKB returns the loss's dtype")
                        for n in ("normalized_loss", "loss_sum", "grad_loss")),
          differs=in_dtype("the products, their sum over ranks and the gradient", "all three",
                           "a bf16 sum of W products of up to M N tokens times a loss",
                           "the products, the sum and the three outputs"),
          variant="pkb")
