"""ring_attention_tp: causal ring attention over a cp x tp mesh, heads split over tp (PKB 55).

Megatron-LM's order "tp-cp": tensor parallelism innermost, so ranks 2c and 2c+1 share a sequence block
and split its heads. Each rank projects its block to q, k, v for its heads, attends causally over the whole
sequence by passing key/value blocks around the cp ring (merging blocks with a running log-sum-exp),
projects with its columns of w_o and all-reduces over tp. Levers: overlap the ring with the block
attention, skip the blocks the causal mask hides (or balance them across ranks), fuse the projection
and the all-reduce.
"""
from pkb_env.contract import (Comm, Compute, Const, Cost, Group, Mesh, Normal, Output, Preset, Rounded, Sharded,
                              Sum, TaskSpec, Tensor)
from pkb_env.tasks._attention import attention, attention_flops, context_exchange
from pkb_env.tasks._clauses import own_blocks

WEIGHT_STD = 0.02  # PKB's scale of both projections (an initialisation-sized weight)


def golden(inputs, world):
    """Full-sequence causal attention in float64 for every tp block of heads, projected and summed over tp."""
    tp = world["tp"]
    h = world.assemble(inputs, "h").double()                       # (B, S, D)
    batch, seq, _ = h.shape
    first = {world.coords(r)["tp"]: r for r in range(world.world_size)}
    total = 0
    for t in range(tp):
        args = inputs[first[t]]
        heads = args["num_heads"] // tp
        qkv = (h @ args["w_qkv"].double().t()).view(batch, seq, 3, heads, -1)       # (B, S, 3, heads, E)
        attn, _ = attention(*qkv.unbind(2), args["scale"], args["causal"])
        total = total + attn.reshape(batch, seq, -1) @ args["w_o"].double().t()
    dtype = inputs[0]["h"].dtype
    blocks = total.to(dtype).chunk(world["cp"], dim=1)
    return [blocks[world.coords(r)["cp"]].clone() for r in range(world.world_size)]


def cost(c):
    """Per rank. Compute: the QKV and output projections of its block and heads, and its share of the causal
    attention (a balanced schedule splits the S(S+1)/2 visible pairs evenly over cp). Communication: the
    least exchange of blocks over cp (`context_exchange`: cp-1 blocks of one (B, S/cp, H/tp, E) tensor
    into the busiest rank, or a head split where that moves fewer bytes); then an all-reduce of the
    output over tp. One round each (the all-reduce depends on the attention)."""
    b, s, d, e = c["B"], c["S"], c["D"], c["E"]
    heads, block = c["H"] // c["tp"], s // c["cp"]
    one = b * block * heads * e * c.elem
    return Cost(
        comm=(context_exchange(c, one, "cp", heads), Comm("all_reduce", c.nbytes("out"), "tp")),
        compute=(Compute(2 * b * block * d * 3 * heads * e + 2 * b * block * heads * e * d, "matmul"),
                 Compute(attention_flops(b, heads, e, s, causal=True) / c["cp"], "matmul")),
        memory_bytes=c.io_bytes(),
    )


# Where rounding enters, measured at the output (RMS up to 0.02^2 * sqrt(H*E*D) at the first position, where
# a query sees one key): q, k, v and the attention output stored in the dtype, one running-output rounding
# per ring step if a candidate keeps it in the dtype, the tp partials rounded; then the tp all-reduce.
OUT_RMS = f"{WEIGHT_STD ** 2} * sqrt(H * E * D)"
TOLERANCE = (Sum("D", WEIGHT_STD, "float32", what="QKV projection")
             + Rounded("4 + cp + tp", OUT_RMS, what="q, k, v, attention output, ring merges and tp partials")
             + Sum("tp", f"{OUT_RMS} / sqrt(tp)", "dtype", what="all-reduce over tp"))

SPEC = TaskSpec(
    name="ring_attention_tp",
    title="Ring attention with tensor parallelism (cp x tp)",
    description="A causal attention layer over a sequence split into cp contiguous blocks and heads split over "
                "tp: every rank projects its block h to q, k, v for its heads, attends over all earlier "
                "positions of the whole sequence, projects with its columns of w_o, and the tp ranks sum their "
                "projections. Every rank returns its block of the layer output, the same on its tp peers.",
    family="context",
    parallelism="context parallel (ring) x tensor parallel (heads), Megatron order tp-cp",
    pkb_id=55,
    origin="ring-flash-attention / Megatron-LM context parallelism with tensor-parallel attention",
    mesh=Mesh(("cp", "W / 2"), ("tp", 2)),
    inputs=(
        Tensor("h", ("B", "S", "D"), layout=Sharded(1, over="cp"), doc="hidden states, sequence block cp_rank"),
        Tensor("w_qkv", ("3 * H * E", "D"), dist=Normal(std=WEIGHT_STD), layout=Sharded(0, over="tp"),
               doc="rows [q; k; v] of this tp rank's H/tp heads"),
        Tensor("w_o", ("D", "H * E"), dist=Normal(std=WEIGHT_STD), layout=Sharded(1, over="tp"),
               doc="columns of this tp rank's heads"),
        Const("num_heads", dim="H", doc="heads in total (H/tp per tp rank)"),
        Const("scale", None, doc="None: 1/sqrt(E)"),
        Const("causal", True),
        Group("tp_group", "tp"),
        Group("cp_group", "cp"),
    ),
    outputs=(Output("out", ("B", "S", "D"), layout=Sharded(1, over="cp"), doc="the layer output"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("h", what="every earlier block's keys matter"),),
    presets={
        "tiny": Preset({"B": 2, "S": 16, "D": 32, "H": 4, "E": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 16, "S": 16, "D": 512, "H": 8, "E": 64}, "bfloat16",
                        "PKB's shapes: h (16, 16/cp, 512), 8 heads of 64; latency-bound"),
        "large": Preset({"B": 1, "S": 8192, "D": 2048, "H": 16, "E": 128}, "bfloat16",
                        "a long sequence: the ring's transfers and the attention compute are of one size"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial seeds; PKB reseeds h by cp rank and the weights by tp rank with "
        "fixed constants, so they are the same in every trial and a candidate can rebuild any peer's block",
        "the weights are declared as tp blocks of global projections (w_qkv's rows [q; k; v] per tp block, "
        "w_o's columns), which is how the reference uses them; the golden attends over the full sequence",
        "a `large` preset (S=8192, 16 heads of 128) where the ring's transfers and the attention compute "
        "are of one size, so overlapping them decides the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("ring_attention_tp", params=(Arg("hidden_states", "h"), Arg("w_qkv"), Arg("w_o"), Arg("num_heads"),
                                        Arg("softmax_scale", "scale"), Arg("causal"), Arg("tp_group"),
                                        Arg("cp_group")))
