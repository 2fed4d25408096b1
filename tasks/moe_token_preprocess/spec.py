"""moe_token_preprocess: the split sizes and per-expert counts of an MoE dispatch (PKB 26).

Megatron-LM's all-to-all token dispatcher, preprocess: each rank counts its (token, expert) pairs per expert
from the router's mask, all-gathers the counts over the expert-parallel group, and derives what the dispatch
all-to-all (input and output splits) and the experts' grouped GEMM (pairs per local expert, from each rank
and in all) need. One all-gather of W x E integers: latency-bound; the lever is one fused pass over the mask
and a collective that launches at once. Each rank's mask is a top-2-of-8 routing of its own tokens drawn per
call from its own seed, with a popularity bias of its own (`tasks/_moe_dispatch.py` `own_mask`), so the
counts are uneven and change every call; they are integers, compared exactly. Not the jointly drawn
`Routing` of PKB 27-29: that comes from a seed every member of the group holds, from which a rank could
redraw every peer's counts, and those counts are all this task exchanges.

Where the outputs live. PKB (after Megatron) returns the two split lists as CPU tensors built from
`.tolist()` and copies the two count tensors to the CPU with `non_blocking=True`: two host syncs inside the
call, and two copies that may not have landed when the call returns (Megatron synchronises later, before
it reads them). Here all four stay on the device: a judge can time neither a hidden sync fairly nor a copy
still in flight, and the task's work is the counting and the exchange. The consumers take the counts on the
device (PKB 27-29 here) and read them to the host once, where NCCL's all-to-all-v needs them.
"""
import torch

from pkb_env.contract import Comm, Compute, Const, Cost, Custom, Exact, Group, Output, TaskSpec, Tensor
from pkb_env.tasks._moe_dispatch import DTYPES, ROUTING, own_mask, picks, presets
from pkb_env.tasks._moe_edges import mask_edges, routing_clauses


def golden(inputs, world):
    """Per rank, from every rank's mask: pairs per expert, summed by destination rank and by local expert."""
    size, experts = world.world_size, world["E"]
    local = experts // size
    counts = torch.stack([picks(args["expert_mask"]).sum(dim=0) for args in inputs])   # (W, E): [s, e]
    outs = []
    for r in range(size):
        mine = counts[:, r * local:(r + 1) * local].contiguous()
        outs.append((counts[r].view(size, local).sum(dim=1), mine.sum(dim=1), mine, mine.sum(dim=0)))
    return outs


def cost(c):
    """One all-gather of E int64 counts per rank; one addition per mask entry; the mask read once."""
    return Cost(comm=(Comm("all_gather", c["W"] * c["E"] * 8),),
                compute=(Compute(c["E"] * c["K"] * c["T"], "vector"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="moe_token_preprocess",
    title="MoE dispatch preprocessing: split sizes and per-expert counts",
    description="Every rank holds expert_mask (E, K, T), its T tokens' top-K picks one-hot (E experts placed "
                "contiguously, E / W per rank). Counting (token, expert) pairs, every rank must return, int64 "
                "on its device: input_splits (W,) (its pairs for each rank), output_splits (W,) (each rank's "
                "pairs for its experts), num_global_tokens_per_local_expert (W, E / W) (rank s's pairs for its "
                "l-th expert) and num_global_sum_tokens_per_local_expert (E / W,) (its experts' pairs from all "
                "ranks).",
    family="expert",
    parallelism="expert parallel: the preprocess of Megatron-LM's all-to-all token dispatcher (count, "
                "all-gather over the EP group)",
    pkb_id=26,
    origin="Megatron-LM MoEAlltoAllTokenDispatcher.preprocess (per-expert counts, all_gather_into_tensor over "
           "the EP group)",
    inputs=(
        Tensor("expert_mask", ("E", "K", "T"), "int64",
               Custom(own_mask, "each token's top-K of E standard-normal gate logits plus a per-expert popularity "
                                "bias of std 1, one-hot (this rank's own draw)"),
               doc="expert_mask[e, k, t] = 1 where token t's k-th pick is expert e"),
        Const("num_experts", dim="E", doc="E, the experts of the group"),
        Group("group", "world", doc="the expert-parallel group"),
    ),
    outputs=(
        Output("input_splits", ("W",), dtype="int64", doc="this rank's pairs for each rank"),
        Output("output_splits", ("W",), dtype="int64", doc="each rank's pairs for this rank's experts"),
        Output("num_global_tokens_per_local_expert", ("W", "E / W"), dtype="int64",
               doc="[s, l]: rank s's pairs for this rank's l-th expert"),
        Output("num_global_sum_tokens_per_local_expert", ("E / W",), dtype="int64",
               doc="this rank's experts' pairs from all ranks"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=Exact("integer counts: exact"),
    presets=presets(),
    edges=mask_edges(),
    clauses=routing_clauses(ROUTING, lambda args: args["expert_mask"].argmax(dim=0), "the counts hold an expert"),
    dtypes=DTYPES,
    departures=(
        "edge cases in every step's trials: an expert that no rank's token picks and a rank whose experts no "
        "token picks",
        "the outputs stay on the device (PKB returns CPU tensors: two built by .tolist(), two copied with "
        "non_blocking=True that may still be in flight when the call returns); no host sync in the call",
        "the counts are int64 from an int64 mask (Hugging Face's one_hot; PKB's mask is fp32, so its counts "
        "are fp32) and are compared exactly; the mask is contiguous (PKB: the permuted view of a one_hot)",
        "the mask is a real top-2-of-8 routing of the rank's tokens, drawn per call from the rank's secret seed "
        "with a popularity bias of its own (uneven counts that change every call); PKB's is seeded with 42 + "
        "rank + trial, which a candidate can reproduce to compute its peers' counts without communicating",
        "the process group is an input the judge builds (PKB: WORLD by default)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb, Ret  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("moe_token_preprocess", returns=(Ret("input_splits", to="int64"), Ret("output_splits", to="int64"),
                                            Ret("num_global_tokens_per_local_expert"),
                                            Ret("num_global_sum_tokens_per_local_expert")))
