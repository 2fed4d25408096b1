"""PKB's statement of its five fused-MoE problems (31, 32, 49, 50, 51), for the `pkb` variants of those tasks
(tasks/<name>/pkb/; docs/pkb_compat.md, "PKB's problem as PKB states it").

pkb-env's tasks draw the routing and give every expert its own MLP (tasks/_moe_fused.py says why); PKB's problem is
another function, stated here as PKB states it, and judged with pkb-env's checks (secret inputs drawn per call from
PKB's distributions, every timed output checked, the sandbox):
- every rank routes its own tokens with its own gate: logits = x gate_weight^T + gate_bias, probabilities their
  softmax over the E experts in the dtype, and the top-k of those probabilities picks the experts (the weights are
  the picked probabilities, not renormalised);
- expert e lives on EP-group rank e // (E / ep), and all the experts of a rank share that rank's one SwiGLU MLP
  (PKB's gate_proj, up_proj and down_proj nn.Linear modules, each rank its own, drawn as nn.Linear initialises);
  with LoRA (32) a rank-8 adapter on each projection, its A and B standard normal as PKB draws them;
- every rank returns (M, N): for each of its tokens, the sum over its picks of weight times the MLP of the rank
  holding the pick's expert;
- PKB's tolerance: |got - expected| <= 1e-2 + 1e-2 |expected| (PKB_RULE).
The golden routes exactly as the reference does (the gate in the dtype: a near-tie of two experts' probabilities is
decided by rounding, as in PKB, where any other summation order may flip it) and runs the MLPs in float64.
PKB's file receives the MLPs as nn.Linear modules made from these tensors (`PKB` below: the variant's mapping).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_env.contract import (Comm, Compute, Computed, Const, Cost, Expr, Fixed, Group, Mesh, Normal, Output, PerRank,
                              Pkb, TaskSpec, Tensor, Tolerance)
from pkb_env.contract.pkb import PKB_TOLERANCE_TEXT, Arg
from pkb_env.tasks._moe_fused import linear_init

DTYPES = ("float32", "bfloat16", "float16")
PKB_RULE = Fixed({d: Tolerance(1e-2, 1e-2, PKB_TOLERANCE_TEXT) for d in DTYPES})
MLP = ("w_gate", "b_gate", "w_up", "b_up", "w_down", "b_down")
LORA = ("lora_gate_A", "lora_gate_B", "lora_up_A", "lora_up_B", "lora_down_A", "lora_down_B")


def inputs(lora: bool, experts: str, k: str) -> tuple:
    def mine(name, shape, dist, doc):
        return Tensor(name, shape, dist=dist, layout=PerRank(), doc=doc)

    return (
        mine("hidden_states", ("M", "N"), Normal(), "this rank's tokens"),
        mine("gate_weight", (experts, "N"), Normal(), "this rank's router weight (each rank its own, as PKB draws it)"),
        mine("gate_bias", (experts,), Normal(), "this rank's router bias"),
        mine("w_gate", ("I", "N"), linear_init("N"), "this rank's gate projection (PKB's gate_proj nn.Linear(N, I))"),
        mine("b_gate", ("I",), linear_init("N"), "its bias"),
        mine("w_up", ("I", "N"), linear_init("N"), "this rank's up projection (PKB's up_proj nn.Linear(N, I))"),
        mine("b_up", ("I",), linear_init("N"), "its bias"),
        mine("w_down", ("N", "I"), linear_init("I"), "this rank's down projection (PKB's down_proj nn.Linear(I, N))"),
        mine("b_down", ("N",), linear_init("I"), "its bias"),
        *((mine("lora_gate_A", ("R", "N"), Normal(), "gate LoRA A (standard normal, as PKB draws it)"),
           mine("lora_gate_B", ("I", "R"), Normal(), "gate LoRA B"),
           mine("lora_up_A", ("R", "N"), Normal(), "up LoRA A"),
           mine("lora_up_B", ("I", "R"), Normal(), "up LoRA B"),
           mine("lora_down_A", ("R", "I"), Normal(), "down LoRA A"),
           mine("lora_down_B", ("N", "R"), Normal(), "down LoRA B")) if lora else ()),
        Const("num_experts", dim=experts, doc="E, the experts of the EP group"),
        Const("top_k", dim=k, doc="experts per token"),
        Group("group", "ep", doc="this rank's expert-parallel group"),
    )


def mlp(x: torch.Tensor, w: dict, lora: bool) -> torch.Tensor:
    """One rank's shared SwiGLU MLP (PKB's expert_forward, with its LoRA adapter), in x's precision."""
    def proj(v, name):
        out = F.linear(v, w["w_" + name], w["b_" + name])
        if lora:
            out = out + F.linear(F.linear(v, w[f"lora_{name}_A"]), w[f"lora_{name}_B"])
        return out

    return proj(F.silu(proj(x, "gate")) * proj(x, "up"), "down")


def route(args: dict, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """PKB's router, exactly as the reference runs it (in the dtype): the top-k probabilities and their experts."""
    probs = torch.softmax(F.linear(args["hidden_states"], args["gate_weight"], args["gate_bias"]), dim=-1)
    return torch.topk(probs, k, dim=-1)


def forward(x: torch.Tensor, gate_weight: torch.Tensor, gate_bias: torch.Tensor, w: dict, num_experts: int,
            top_k: int, group, lora: bool) -> torch.Tensor:
    """The variants' reference (trusted, on the reference's ranks): route, dispatch every pick to the rank holding
    its expert with an all-to-all-v, that rank's MLP, send the results back, weight and add."""
    ep = dist.get_world_size(group)
    weights, experts = route({"hidden_states": x, "gate_weight": gate_weight, "gate_bias": gate_bias}, top_k)
    owner = (experts // (num_experts // ep)).flatten()
    order = torch.argsort(owner, stable=True)            # picks grouped by the rank that runs them
    token = torch.arange(x.shape[0], device=x.device).repeat_interleave(top_k)[order]
    send = torch.bincount(owner, minlength=ep)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    send, recv = send.tolist(), recv.tolist()
    rows = x.new_empty((sum(recv), x.shape[1]))
    dist.all_to_all_single(rows, x[token].contiguous(), recv, send, group=group)
    done = mlp(rows, w, lora)
    back = x.new_empty((len(token), x.shape[1]))
    dist.all_to_all_single(back, done.contiguous(), send, recv, group=group)
    out = torch.zeros_like(x)
    return out.index_add_(0, token, back * weights.flatten()[order, None])


def make_golden(lora: bool, experts: str, k: str):
    names = MLP + (LORA if lora else ())

    def golden(inputs, world):
        per_expert = Expr(experts).integer(world.sizes) // world["ep"]
        outs = []
        for r, args in enumerate(inputs):
            weights, picked = route(args, Expr(k).integer(world.sizes))
            x = args["hidden_states"].double()
            coords = world.coords(r)
            out = torch.zeros_like(x)
            for slot in range(picked.shape[1]):
                for owner in picked[:, slot].div(per_expert, rounding_mode="floor").unique().tolist():
                    peer = world.layout.rank_of({**coords, "ep": owner})
                    w = {n: inputs[peer][n].double() for n in names}
                    rows = picked[:, slot] // per_expert == owner
                    out[rows] += weights[rows, slot, None].double() * mlp(x[rows], w, lora)
            outs.append(out.to(args["hidden_states"].dtype))
        return outs

    return golden


def make_cost(experts: str, k: str):
    return lambda c: cost(c, Expr(experts).integer(c.sizes), Expr(k).integer(c.sizes))


def cost(c, experts: int, k: int):
    """Two all-to-all-v of the tokens' K picks (rows of N), three projections per pick (6 N I FLOPs, and a LoRA
    adapter's 6 R (N + I)), the router's 2 N E per token."""
    pairs = c["M"] * k
    row = c["N"] * c.elem
    flops = pairs * (6 * c["N"] * c["I"] + (6 * c["R"] * (c["N"] + c["I"]) if "R" in c.dims else 0))
    offrank = pairs * row * (c["ep"] - 1) // c["ep"]
    return Cost(comm=(Comm("all_to_allv", offrank, "ep"), Comm("all_to_allv", offrank, "ep")),
                compute=(Compute(flops + 2 * c["M"] * c["N"] * experts, "matmul"),), memory_bytes=c.io_bytes())


def linear(weight: str, bias: str):
    """PKB's nn.Linear module over this call's weight and bias tensors (no copy, no gradient)."""
    def make(call):
        w, b = call.values[weight], call.values[bias]
        module = torch.nn.Linear(w.shape[1], w.shape[0], device="meta")
        module.weight = torch.nn.Parameter(w, requires_grad=False)
        module.bias = torch.nn.Parameter(b, requires_grad=False)
        return module
    return Computed(weight.replace("w_", "") + "_proj", make, f"nn.Linear over {weight} and {bias}")


def pkb_call(name: str, lora: bool) -> Pkb:
    """How PKB's file is called on the variant: the MLP tensors as PKB's nn.Linear modules, the rest as they are."""
    return Pkb(name, params=(Arg("hidden_states"), Arg("gate_weight"), Arg("gate_bias"), linear("w_gate", "b_gate"),
                             linear("w_up", "b_up"), linear("w_down", "b_down"),
                             *(Arg(n) for n in (LORA if lora else ())), Arg("num_experts"), Arg("top_k"),
                             Arg("group")))


def variant(*, task: str, pkb_id: int, experts: str, k: str, ep: str, mesh_dp: str, presets: dict, lora: bool = False,
            note: str = "", dtypes: tuple[str, ...] = DTYPES, **extra) -> TaskSpec:
    """The variant of `task` stating PKB's problem `pkb_id` (the module docstring)."""
    return TaskSpec(
        name=f"pkb_env.tasks.{task}.pkb",
        title=f"PKB {pkb_id} as PKB states it: expert-parallel MoE forward with its own router"
              + (" and LoRA" if lora else ""),
        description=(f"Every rank holds hidden_states (M, N), its own router (gate_weight (E, N), gate_bias (E,)) "
                     f"and its own SwiGLU MLP (w_gate, w_up (I, N), w_down (N, I), with biases"
                     + (", and a rank-R LoRA adapter on each projection" if lora else "")
                     + f"). E = {experts} experts sit contiguously on the {ep} ranks of the EP group, and the "
                       f"experts of a rank share its MLP. Each rank routes its tokens: the top-{k} of the softmax "
                       f"over E of x gate_weight^T + gate_bias, in the dtype; every rank returns (M, N): for each "
                       f"token, the sum over its picks of the picked probability times the MLP of the rank holding "
                       f"the pick's expert. {note}").strip(),
        family="expert",
        parallelism="expert parallel, PKB's statement: router, dispatch, per-rank MLP, combine",
        pkb_id=pkb_id,
        origin="ParallelKernelBench's problem as its harness states it (its inputs and tolerance)",
        mesh=Mesh(("dp", mesh_dp), ("ep", ep)),
        inputs=inputs(lora, experts, k),
        outputs=(Output("out", ("M", "N"), layout=PerRank(), doc="this rank's tokens after the MoE layer"),),
        golden=make_golden(lora, experts, k),
        cost=make_cost(experts, k),
        tolerance_rule=PKB_RULE,
        presets=presets,
        dtypes=dtypes,
        departures=("PKB's problem as PKB states it, judged with pkb-env's checks: inputs from secret per-call "
                    "seeds with PKB's distributions (not PKB's 42 + rank + trial), every timed call checked",
                    "the EP group is built by the judge and passed in (PKB passes None; its narrow-EP reference "
                    "builds the same groups itself)"),
        **extra,
    )
