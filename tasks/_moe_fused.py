"""What the expert-parallel fused MoE forward tasks (PKB 31, 32, 49, 50, 51) share: the expert MLP's inputs,
the golden, the cost model, the tolerance and the spec, declared once.

One MoE layer's forward with expert parallelism, as Megatron-LM's all-to-all token dispatcher runs it: every
rank of an expert-parallel (EP) group holds its own tokens, hidden_states (M, N), and the top-k experts the
router picked for each with their gate weights; experts sit contiguously on the group's ranks (expert e on
group rank e // (E / ep)), each with its own SwiGLU MLP (gate and up projections N -> I, down projection
I -> N, all with biases, as PKB's nn.Linear). The layer permutes its (token, pick) pairs by expert, exchanges
the counts, dispatches the rows with an all-to-all-v, runs each local expert on what arrived, sends the
results back with a second all-to-all-v and sums each token's picks weighted by the gate.

The routing is drawn by the judge jointly over each EP group per call (contract v3's `Routing`): splits are
uneven and change every call, with a per-call popularity skew (hot experts). PKB computes the router inside
the call from a random per-rank gate weight of RMS 1 (logits of RMS sqrt(N) = 32 in bf16): a candidate that
sums the router GEMM in another order flips the top-k of near-tied tokens and sends them to other experts,
an O(1) error no tolerance can absorb. Here the picks and weights are inputs (the router's GEMM is 1/(3 I/E)
of the experts' FLOPs), and everything after them is the task.

The five tasks differ in the number of experts and the EP group:
- 31 fused_moe_fwd: E = 8 whatever W (ep = min(8, W), dp takes the rest), top-2;
- 32 fused_moe_fwd_lora: as 31, with a rank-8 LoRA adapter on each expert's three projections;
- 49 moe_ep_balanced: E = W, one expert per rank;
- 50 moe_ep_wide: E = 2W, two per rank;
- 51 moe_ep_narrow: E = W/2 (the largest divisor of an even W below W, PKB's rule), EP groups of W/2 ranks
  inside data parallelism (two groups), top-min(2, E).

A plain module, not a task package (`pkb_env.task.task_names()` skips names starting with an underscore).
"""
from __future__ import annotations

import torch

from pkb_env.contract import (Comm, Compute, Const, Cost, Custom, Expr, Group, Mesh, Output, Preset, Propagated,
                              Rounded, Routed, Routing, Sharded, Sum, TaskSpec, Tensor)
from pkb_env.tasks._moe_edges import routing_clauses, routing_edges

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
SKEW = 0.5
"""The std of the per-call popularity bias of the experts: the busiest expert takes ~1.5x the mean's pairs
(docs/task_contract.md, "Top-k routing drawn jointly over a group"), as in a trained layer with a balancing loss."""

EXPERT_WEIGHTS = ("w_gate", "b_gate", "w_up", "b_up", "w_down", "b_down")
LORA_WEIGHTS = ("lora_gate_A", "lora_gate_B", "lora_up_A", "lora_up_B", "lora_down_A", "lora_down_B")


def linear_init(fan_in: str) -> Custom:
    """nn.Linear's default initialisation: uniform in +-1/sqrt(fan_in), `fan_in` a size expression."""
    size = Expr(fan_in)

    def draw(gen, shape, dtype, env):
        bound = size.real(env) ** -0.5
        return torch.empty(shape, dtype=torch.float32, device=gen.device).uniform_(-bound, bound, generator=gen) \
            .to(dtype)

    return Custom(draw, f"uniform in +-1/sqrt({fan_in}) (nn.Linear's default initialisation)",
                  kinds=frozenset({"float"}))


def expert_inputs(experts: str) -> tuple[Tensor, ...]:
    """Each expert's SwiGLU MLP, stacked over the experts: a block of `experts` sharded over the EP group
    (contiguously: this rank's E/ep experts), the same block on every rank of the same EP coordinate."""
    def block(name, shape, fan_in, doc):
        return Tensor(name, (experts, *shape), dist=linear_init(fan_in), layout=Sharded(0, over="ep"), doc=doc)

    return (block("w_gate", ("I", "N"), "N", "this rank's experts' gate projections (nn.Linear(N, I) weights)"),
            block("b_gate", ("I",), "N", "their biases"),
            block("w_up", ("I", "N"), "N", "this rank's experts' up projections (nn.Linear(N, I) weights)"),
            block("b_up", ("I",), "N", "their biases"),
            block("w_down", ("N", "I"), "I", "this rank's experts' down projections (nn.Linear(I, N) weights)"),
            block("b_down", ("N",), "I", "their biases"))


def lora_inputs(experts: str) -> tuple[Tensor, ...]:
    """A rank-R LoRA adapter on each expert's three projections (A: R x fan-in, B: out x R), drawn like the
    base weights so that the adapter moves each projection by about as much as the base weight does."""
    def block(name, shape, fan_in, doc):
        return Tensor(name, (experts, *shape), dist=linear_init(fan_in), layout=Sharded(0, over="ep"), doc=doc)

    return (block("lora_gate_A", ("R", "N"), "N", "this rank's experts' gate LoRA A"),
            block("lora_gate_B", ("I", "R"), "R", "this rank's experts' gate LoRA B"),
            block("lora_up_A", ("R", "N"), "N", "this rank's experts' up LoRA A"),
            block("lora_up_B", ("I", "R"), "R", "this rank's experts' up LoRA B"),
            block("lora_down_A", ("R", "I"), "I", "this rank's experts' down LoRA A"),
            block("lora_down_B", ("N", "R"), "R", "this rank's experts' down LoRA B"))


def expert_mlp(x: torch.Tensor, w: dict[str, torch.Tensor], e: int, lora: bool) -> torch.Tensor:
    """Expert e's SwiGLU MLP (with its LoRA adapter) on the rows x, in x's precision (the golden: float64)."""
    def proj(v, name, lora_name):
        out = v @ w["w_" + name][e].T + w["b_" + name][e]
        if lora:
            out = out + (v @ w[f"lora_{lora_name}_A"][e].T) @ w[f"lora_{lora_name}_B"][e].T
        return out

    h = torch.nn.functional.silu(proj(x, "gate", "gate")) * proj(x, "up", "up")
    return proj(h, "down", "down")


def make_golden(lora: bool):
    """The golden: every token's picks through their experts' MLPs on the global weights in float64, weighted by
    the gate weights and summed, rounded once to the dtype."""
    names = EXPERT_WEIGHTS + (LORA_WEIGHTS if lora else ())

    def golden(inputs, world):
        w = {n: world.assemble(inputs, n).double() for n in names}
        outs = []
        for args in inputs:
            x, idx, gate = args["hidden_states"].double(), args["topk_idx"], args["topk_weights"].double()
            out = torch.zeros_like(x)
            for e in idx.unique().tolist():
                hit = idx == e
                rows = hit.any(1)
                out[rows] += (gate * hit).sum(1)[rows, None] * expert_mlp(x[rows], w, e, lora)
            outs.append(out.to(args["hidden_states"].dtype))
        return outs

    return golden


def cost(c):
    """Per rank, the cheaper of two ways to bring tokens and experts together:
    - move tokens: dispatch and combine, two all-to-all-v over the EP group of the busiest rank's off-rank
      (token, expert) pairs, one row of N each (realised over the timed calls);
    - move experts: all-gather every expert's weights over the EP group and run every pick where its token
      lives.
    Compute: 6 N I FLOPs per pair (three projections; a rank-R LoRA adapter on each adds 6 R (N + I)),
    the mean rank's M K pairs (the work can be rebalanced by moving experts); memory: inputs and outputs once."""
    load = c.routing("route")
    row = c["N"] * c.elem
    pairs = c["M"] * (c.nbytes("topk_idx") // (c["M"] * 8))
    lora = "R" in c.dims
    weights = sum(c.nbytes(n) for n in EXPERT_WEIGHTS + (LORA_WEIGHTS if lora else ())) * c["ep"]
    tokens = (Comm("all_to_allv", load.offrank_pairs * row, "ep"), Comm("all_to_allv", load.offrank_pairs * row, "ep"))
    experts = (Comm("all_gather", weights, "ep"),)
    flops = 6 * c["N"] * c["I"] + (6 * c["R"] * (c["N"] + c["I"]) if lora else 0)
    return Cost(comm=c.cheapest(tokens, experts), compute=(Compute(flops * pairs, "matmul"),),
                memory_bytes=c.io_bytes())


def tolerance_rule(lora: bool, k: str):
    """Where the reference rounds (and where a correct candidate may round instead): the projections
    accumulate N (and I) unit-scale products in fp32; the intermediates (gate, its SiLU, up, their product:
    RMS under 0.6) are each rounded to the dtype and reach an output through the down projection's I weights
    of RMS 1/sqrt(3 I); each pick's output (RMS ~0.15) is rounded, weighted and summed over K picks (in
    the dtype, as PKB's scatter-add, or in fp32)."""
    gain = 2 if lora else 1   # a LoRA adapter drawn like the base weight doubles each projection's variance
    return (Sum("N", f"{gain} / sqrt(3 * N)", "float32", what="gate and up projections, accumulated in fp32")
            + Propagated("4 * I", f"{0.3 * gain} / sqrt(3 * I)",
                         what="gate, SiLU, up and their product, each rounded to the dtype, through the down "
                              "projection")
            + Rounded(f"2 * {k}", 0.12 * gain, what="each pick's expert output rounded, weighted and summed over "
                                                "the K picks"))


def fused_moe_spec(*, name: str, title: str, pkb_id: int, experts: str, k: str, ep: str, description: str,
                   parallelism: str, presets: dict[str, Preset], departures: tuple[str, ...], lora: bool = False,
                   **extra) -> TaskSpec:
    """The spec of one of the five tasks: `experts`, `k` and `ep` are size expressions (the number of experts,
    picks per token, and the EP group's width; dp = W / ep takes the rest of the ranks). Every step's trials
    hold an expert no token picks and a rank whose experts no token picks (tasks/_moe_edges.py)."""
    routing = Routing("route", tokens="M", experts=experts, k=k, group="ep", skew=SKEW,
                      doc="hot experts change per call")
    inputs = (
        Tensor("hidden_states", ("M", "N"), doc="this rank's tokens"),
        Tensor("topk_idx", ("M", k), "int64", Routed("route", "topk_idx"),
               doc="each token's experts, the router's top-k (distinct per token)"),
        Tensor("topk_weights", ("M", k), "float32", Routed("route", "topk_weights"),
               doc="their gate weights (softmax over the k picked, fp32 as Megatron's router keeps them)"),
        *expert_inputs(experts),
        *(lora_inputs(experts) if lora else ()),
        Const("num_experts", dim=experts, doc="E, the experts of the EP group"),
        Group("group", "ep", doc="this rank's expert-parallel group (the world where ep = W)"),
    )
    return TaskSpec(
        name=name,
        title=title,
        description=description,
        family="expert",
        parallelism=parallelism,
        pkb_id=pkb_id,
        origin="Megatron-LM MoE layer with the all-to-all token dispatcher (permute, count exchange, all-to-all "
               "dispatch, grouped SwiGLU experts, all-to-all combine, weighted unpermute)",
        mesh=Mesh(("dp", "W / ep"), ("ep", ep)),
        routings=(routing,),
        edges=routing_edges(routing),
        clauses=routing_clauses(routing, lambda args: args["topk_idx"], "each local expert's MLP runs on the pairs "
                                "it receives, an expert"),
        inputs=inputs,
        outputs=(Output("out", ("M", "N"), doc="this rank's tokens after the MoE layer: the sum over each token's "
                                               "picks of gate weight times the expert's MLP"),),
        golden=make_golden(lora),
        cost=cost,
        tolerance_rule=tolerance_rule(lora, k),
        presets=presets,
        dtypes=DTYPES,
        departures=departures,
        **extra,
    )


COMMON_DEPARTURES: tuple[str, ...] = (
    "edge cases, each in every step's trials: an expert that no token picks, and a rank whose experts no token "
    "picks (random routings leave an expert empty in about 2% of calls)",
    "the router's decision is an input: each token's top-k experts and gate weights are drawn by the judge per "
    "call, jointly over each EP group (standard-normal logits plus a per-call popularity skew; weights the "
    "softmax over the k picked, Mixtral's and DeepSeek's normalisation), instead of being computed in the call "
    "from a random per-rank gate weight and bias (PKB: every rank routes with a different router, logits of "
    "RMS sqrt(N) in bf16 whose top-k flips under any other summation order, sending a token to another expert, "
    "and weights that are the softmax over all experts, not renormalised)",
    "every expert has its own SwiGLU MLP, sharded contiguously over the EP group (PKB gives each rank one "
    "gate/up/down nn.Linear that all its local experts share, so experts on one rank are the same function "
    "and a candidate could ignore which local expert a token picked)",
    "the weights are tensors stacked over the experts, not nn.Linear modules, drawn as nn.Linear initialises "
    "(uniform in +-1/sqrt(fan_in))",
    "inputs come from secret per-call, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate can "
    "reproduce to make its peers' tokens without communicating)",
    "the EP group is built by the judge and passed in (PKB passes None and uses the world); the reference "
    "makes one host sync per call (the split sizes an all-to-all-v over NCCL needs) where PKB's makes four, "
    "and sums each token's weighted picks in fp32, rounding once (PKB multiplies and scatter-adds in the "
    "dtype; the tolerance admits both)",
)
