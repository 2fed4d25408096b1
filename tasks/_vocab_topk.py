"""What the three vocab-parallel log-probability tasks (PKB 82, 83, 84) share, declared once.

NeMo-RL's GRPO computes, for every generated token, its log-probability under the policy with the same
top-k / top-p filter the sampler used, from logits split over the vocabulary by a tensor-parallel output
layer. The three tasks are that forward pass (82), the same in chunks of tokens (83), and its gradient
with respect to the logits (84). They share the inputs, the filter's rule, the golden's float64 filter,
the candidates' all-gather in the cost model, the presets and the departures from PKB.

The filter's rule, written once for the three task descriptions: keep the top_k largest logits of each
row (ties at the k-th value all kept); then keep a surviving logit when the probability, under the
softmax over the survivors, of the survivors strictly larger than it is below top_p. That is PKB's
nucleus (sorted ascending, cumulative probability above 1 - top_p) with ties decided together, so that
no sort order changes the answer.

A plain module, not a task package (`pkb_env.task.task_names()` skips names starting with an underscore).
"""
from __future__ import annotations

import math

import torch

from pkb_env.contract import (Clause, Comm, Compute, Const, Cost, CostContext, Custom, Edge, Group, Integers, Normal,
                              Output, Preset, Replicated, Sharded, Sum, TaskSpec, Tensor, WorldSizes)
from pkb_env.tasks._clauses import sixteen_bit

FILTER_RULE = ("the filter keeps the top_k largest logits of each row (ties at the k-th value all kept), then "
               "keeps a survivor when the softmax probability (over the survivors) of the survivors strictly "
               "larger than it is below top_p; decide it in float32 or wider")

TOP_P = 0.9


def _likely_targets(gen, shape, dtype, env, given):
    """Standard normal logits, the target's raised by sqrt(2 ln V) + 0.5 (about the largest of V normals),
    where this rank's vocabulary block holds it."""
    out = torch.randn(shape, generator=gen, device=gen.device)
    columns = given.values["target"].to(gen.device) - given.offsets[-1]
    here = (columns >= 0) & (columns < shape[-1])
    raise_by = math.sqrt(2 * math.log(env["V"])) + 0.5
    out += torch.nn.functional.one_hot(columns.clamp(0, shape[-1] - 1), shape[-1]) * here.unsqueeze(-1) * raise_by
    return out.to(dtype)


LOGITS = Tensor("vocab_parallel_logits", ("B", "S", "V"), layout=Sharded(2),
                dist=Custom(_likely_targets, "standard normal, the target's logit raised by sqrt(2 ln V) + 0.5 "
                                             "(so that it usually survives the filter, as a sampled token does)",
                            kinds=frozenset({"float"}), reads=("target",)),
                doc="logits of this rank's vocabulary block")
def integer_logits(logits, draw):
    """Ties at the top-k boundary, which the filter's rule decides (ties at the k-th value all kept): every
    logit rounded to an integer, so a row of V normal values holds several of each value around its k-th
    largest. Random float32 logits never tie, and a candidate keeping exactly K logits passed every trial."""
    return logits.float().round().to(logits.dtype)


TIES = Edge("ties", "vocab_parallel_logits", integer_logits, "integer logits tied at the top-k boundary",
            everywhere=True)
def lowered_target(logits, draw):
    """The first token's target logit set to -30 on the rank whose block holds it: the filter removes it, and
    its output is -inf (or its gradient row zero). Raised targets survive in most calls (a step's trials miss
    the -inf in about half the steps at tiny)."""
    target, width = int(draw.given["target"][0, 0]), logits.shape[-1]
    start = draw.coords["world"] * width
    if not start <= target < start + width:
        return logits
    logits = logits.clone()
    logits[0, 0, target - start] = -30.0
    return logits


FILTERED = Edge("filtered_target", "vocab_parallel_logits", lowered_target, "a target logit of -30, which the "
                "filter removes", everywhere=True)
TARGET = Tensor("target", ("B", "S"), dtype="int64", dist=Integers(0, "V"), layout=Replicated(),
                doc="the token id whose log-probability is wanted, over the whole vocabulary")
GRAD_OUTPUT = Tensor("grad_output", ("B", "S"), dist=Normal(), layout=Replicated(),
                     doc="gradient of the loss with respect to each token's log-probability")
TP_GROUP = Group("tp_group", "world", doc="the tensor-parallel group the vocabulary is split over")
TOP_K = Const("top_k", dim="K", doc="keep the K largest logits of each row")
TOP_P_INPUT = Const("top_p", TOP_P, doc="then keep the nucleus of probability top_p")
CHUNK = Const("chunk_size", dim="min(S, ceil_div(max(W, S // 4), W) * W)",
              doc="sequence positions per chunk: chunks of B*chunk_size tokens of the flattened (B*S) tokens")

CHUNK_RULE = ("chunk_size is PKB's rule (max(W, S/4) rounded up to a multiple of W, at most S) written as a size "
              "expression, so chunks of B*chunk_size tokens always split evenly over the ranks")
SPLIT_TOKENS = WorldSizes(splits=("B * S",), reason="the reference redistributes the B*S tokens evenly by rank")

# The survivors' normaliser: at most ~K exponentials that, scaled by it, are probabilities summing to 1; its
# fp32 rounding is a relative error that a log turns into the same absolute error (and a gradient scales).
NORMALISER = Sum("K", "1 / K", "float32", what="softmax over the <= K survivors, in fp32")
LOG_PROB = NORMALISER + Sum(3, 1, "float32", what="x_target - max - log(normaliser), three fp32 terms of ~1")


def keep_float64(logits: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """The filter's keep mask in float64, written from the other side of the reference's: sorted
    descending, the mass strictly above a logit is the exclusive running sum at the first of its ties."""
    x = logits.double()
    keep = torch.ones_like(x, dtype=torch.bool)
    if top_k is not None and top_k > 0:
        keep = x >= x.topk(min(top_k, x.shape[-1]), dim=-1).values[..., -1:]
    if top_p is not None and top_p < 1.0:
        probs = x.masked_fill(~keep, -math.inf).softmax(dim=-1)
        descending, order = x.sort(dim=-1, descending=True)
        ranked = probs.gather(-1, order)
        above = ranked.cumsum(dim=-1) - ranked
        negated = (-descending).contiguous()
        first_tie = torch.searchsorted(negated, negated, right=False)
        mass_above = torch.empty_like(above).scatter_(-1, order, above.gather(-1, first_tie))
        keep = keep & (mass_above < top_p)
    return keep


def filtered_float64(inputs, world) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(global logits in float64 with -inf outside the filter, the keep mask, the targets)."""
    args = inputs[0]
    logits = world.assemble(inputs, "vocab_parallel_logits").double()
    keep = keep_float64(logits, args["top_k"], args["top_p"])
    return logits.masked_fill(~keep, -math.inf), keep, world.assemble(inputs, "target")


def golden_log_probs(inputs, world):
    """Each target's log-probability under the filtered softmax over the whole vocabulary, in float64."""
    filtered, _, target = filtered_float64(inputs, world)
    log_probs = filtered.log_softmax(dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return world.distribute(log_probs.float(), "log_probs")


def candidates_comm(c: CostContext) -> Comm:
    """Every token's output depends on the filter over the whole vocabulary, and only the K largest logits
    of a row can survive it. So a rank's K largest logits per token (and the target's logit, from its
    owner) are all it must share: one all-gather of (B*S, K+1) values per rank lets every rank finish every
    token. PKB's all-to-all of the whole logits moves V/(W*(K+1)) times more."""
    return Comm("all_gather", c["W"] * c["B"] * c["S"] * (c["K"] + 1) * c.elem)


def cost(c: CostContext, vector_per_logit: int) -> Cost:
    """The candidates' all-gather; a pass over this rank's logits (`vector_per_logit` operations each);
    every input read and every output written once."""
    return Cost(comm=(candidates_comm(c),),
                compute=(Compute(vector_per_logit * c["B"] * c["S"] * c["V"] / c["W"], "vector"),),
                memory_bytes=c.io_bytes())


def forward_cost(c: CostContext) -> Cost:
    """The log-probabilities: a top-k selection (compare) per logit and the exponent of the survivors."""
    return cost(c, vector_per_logit=2)


FORWARD = ("Every rank holds the logits (B, S, V/W) of its block of the vocabulary (rank r: token ids r*V/W "
           "to (r+1)*V/W - 1) and the targets (B, S). Every rank must return, as float32 (B, S), each target's "
           "log-probability under the softmax over the whole vocabulary of the filtered logits (-inf where the "
           f"filter removes the target): {FILTER_RULE}.")
LOG_PROBS = Output("log_probs", ("B", "S"), dtype="float32", layout=Replicated(),
                   doc="log softmax(filtered logits)[target], per token")


def presets() -> dict[str, Preset]:
    """tiny for CPU ranks; bench PKB's (2, 8) tokens over 256 ids; large NeMo-RL's 32000-id vocabulary
    over 8192 tokens (the published case study's shape), where the logits' bytes dominate. A fresh dict."""
    return {
        "tiny": Preset({"B": 2, "S": 8, "V": 64, "K": 10}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 2, "S": 8, "V": 256, "K": 10}, "bfloat16",
                        "PKB's shapes: logits (2, 8, 256/W), top-k 10, top-p 0.9; latency-bound"),
        "large": Preset({"B": 1, "S": 8192, "V": 32000, "K": 10}, "bfloat16",
                        "NeMo-RL's GRPO case study: 32000-token vocabulary, 8192 tokens; the logits' bytes "
                        "dominate, so what crosses the links (all logits, or each rank's top-k) decides"),
    }


DEPARTURES = (
    "the targets are random per trial (PKB's are (17 or 19 * position + 3 or 5 + trial) mod V) and the "
    "logits come from secret per-rank seeds; as in PKB, each target's logit is raised so that it usually "
    "survives the filter, here by sqrt(2 ln V) + 0.5 (PKB's +8 makes the target the only survivor of top-p "
    "0.9, and most outputs exactly 0)",
    "the filter runs on float32 logits and decides ties at the top-p cut together (PKB filters in the logits' "
    "dtype, where a bf16 softmax and cumulative sum put the cut within ~1e-3 of its threshold, and breaks "
    "ties by sort order, so which tokens survive depends on rounding and on the sort implementation)",
    "the process group is declared (the whole world) and passed in; PKB passes None",
    "a `large` preset (NeMo-RL's 32000-token vocabulary over 8192 tokens) where moving the logits dominates",
    "edge cases, each in every step's trials: integer logits (ties at the k-th value) and a target the filter "
    "removes; a step in float32 adds a trial in bfloat16 (the filter decided in float32 from 16-bit logits)",
)


def _tie_at_k(trial) -> bool:
    """A row whose K-th largest logit (over the whole vocabulary) equals the next one."""
    ranked = trial.world.assemble(trial.inputs, "vocab_parallel_logits").float().sort(dim=-1, descending=True)
    k = trial.inputs[0]["top_k"]
    return bool((ranked.values[..., k - 1] == ranked.values[..., k]).any())


def _target_filtered(trial) -> bool:
    """A target the filter removes (its output -inf, or a zero gradient row)."""
    _, keep, target = filtered_float64(trial.inputs, trial.world)
    return not bool(keep.gather(-1, target.unsqueeze(-1)).all())


CLAUSES = (
    Clause("ties_kept", "the top_k largest logits with ties at the k-th value all kept: a row whose k-th and "
           "(k+1)-th largest logits are equal", _tie_at_k, "edge case ties (integer logits)", edge="ties"),
    Clause("target_filtered", "-inf where the filter removes the target: a target outside the survivors",
           _target_filtered, "edge case filtered_target (a target's logit set to -30)", edge="filtered_target"),
    sixteen_bit("fp32_filter", "the filter decided in float32 or wider: a 16-bit input's softmax and cut not "
                "taken in its own dtype"),
)


def task(*, name: str, title: str, description: str, pkb_id: int, origin: str, parallelism: str,
         inputs: tuple, outputs: tuple, golden, cost, tolerance, departures: tuple[str, ...] = ()) -> TaskSpec:
    """One of the three tasks' TaskSpec: family, presets, dtypes, the token split and the shared departures
    filled in."""
    return TaskSpec(name=name, title=title, description=description, family="vocab", parallelism=parallelism,
                    pkb_id=pkb_id, origin=origin, inputs=inputs, outputs=outputs, golden=golden, cost=cost,
                    tolerance_rule=tolerance, presets=presets(), dtypes=("float32", "bfloat16", "float16"),
                    world_sizes=SPLIT_TOKENS, edges=(TIES, FILTERED), clauses=CLAUSES,
                    departures=DEPARTURES + departures)
