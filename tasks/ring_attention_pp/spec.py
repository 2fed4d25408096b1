"""ring_attention_pp: attention layers as pipeline stages, each context parallel over a ring (PKB 56).

A pp x cp mesh in Megatron-LM's order (cp innermost): stage 0's ranks run layer 0 on their sequence
blocks, passing key/value blocks around their cp ring; each then hands its output block to the stage-1
rank with the same cp coordinate, which runs layer 1 the same way. The stages are serial for one call,
so the levers are the pipeline's: split the batch into micro-batches so that stage 1 starts on the first
while stage 0 computes the next, and overlap the hand-off and the ring with the GEMMs; plus the ring's own
(overlap each transfer with the block attention; the blocks the causal mask hides need not travel or be
computed, and the causal work can be balanced over the ring).
"""
from pkb_env.contract import (Comm, Compute, Const, Cost, Group, Mesh, Normal, Output, PerRank, Preset, Sharded,
                              TaskSpec, Tensor)
from pkb_env.tasks._attention import (PREDICTABLE_SEEDS, attention, attention_flops, context_exchange,
                                      layer_tolerance)
from pkb_env.tasks._clauses import own_blocks

WEIGHT_STD = 0.02  # PKB's scale of both projections (an initialisation-sized weight)


def golden(inputs, world):
    """Each stage's layer in float64 on the full sequence, stage 1 on stage 0's unrounded output; every
    stage's output rounded once and split into cp blocks."""
    x = world.assemble(inputs, "h").double()
    first = {world.coords(r)["pp"]: r for r in range(world.world_size)}
    stage_out = []
    for stage in range(world["pp"]):
        args = inputs[first[stage]]
        batch, seq, _ = x.shape
        qkv = (x @ args["w_qkv"].double().t()).view(batch, seq, 3, args["num_heads"], -1)
        attn, _ = attention(*qkv.unbind(2), args["softmax_scale"], args["causal"])
        x = attn.reshape(batch, seq, -1) @ args["w_o"].double().t()
        stage_out.append(x.to(args["h"].dtype).chunk(world["cp"], dim=1))
    return [stage_out[world.coords(r)["pp"]][world.coords(r)["cp"]].clone() for r in range(world.world_size)]


def cost(c):
    """Per rank (one layer each): the projections of its block and its share of the causal attention
    (matmuls; micro-batches let the stages work at once); the least exchange of blocks over cp
    (`context_exchange`); the hand-off of one (B, S/cp, D) block between stages; inputs and outputs once."""
    b, block, d, heads, e = c["B"], c["S"] // c["cp"], c["D"], c["H"], c["E"]
    return Cost(
        comm=(context_exchange(c, b * block * heads * e * c.elem, "cp", heads),
              Comm("sendrecv", c.nbytes("out"), "pp")),
        compute=(Compute(2 * b * block * d * 4 * heads * e, "matmul"),
                 Compute(attention_flops(b, heads, e, c["S"], causal=True) / c["cp"], "matmul")),
        memory_bytes=c.io_bytes(),
    )


SPEC = TaskSpec(
    name="ring_attention_pp",
    title="Ring attention with pipeline stages (pp x cp)",
    description="Two causal attention layers as two pipeline stages over a sequence split into cp contiguous "
                "blocks: a stage-0 rank runs layer 0 on its block h (B, S/cp, D) with ring attention over its "
                "cp group and hands the result to its stage-1 peer, which runs layer 1 on it the same way. "
                "Every rank returns its stage's output for its block.",
    family="context",
    parallelism="context parallel (ring) x pipeline parallel (one layer per stage), Megatron order with cp innermost",
    pkb_id=56,
    origin="Megatron-LM context parallelism inside pipeline stages (ring-flash-attention's ring)",
    mesh=Mesh(("pp", 2), ("cp", "W / 2")),
    inputs=(
        Tensor("h", ("B", "S", "D"), layout=Sharded(1, over="cp"),
               doc="hidden states, sequence block cp_rank (used by stage 0; later stages receive theirs)"),
        Tensor("w_qkv", ("3 * H * E", "D"), dist=Normal(std=WEIGHT_STD), layout=PerRank(over="pp"),
               doc="this stage's QKV projection, rows [q; k; v]"),
        Tensor("w_o", ("D", "H * E"), dist=Normal(std=WEIGHT_STD), layout=PerRank(over="pp"),
               doc="this stage's output projection"),
        Const("num_heads", dim="H"),
        Const("softmax_scale", None, doc="None: 1/sqrt(E)"),
        Const("causal", True),
        Group("cp_group", "cp"),
        Group("pp_group", "pp"),
    ),
    outputs=(Output("out", ("B", "S / cp", "D"), doc="this stage's output for this rank's sequence block"),),
    golden=golden,
    cost=cost,
    tolerance_rule=layer_tolerance(WEIGHT_STD, "5 + cp", "q, k, v, scores, probabilities, the attention output, "
                                                           "one ring merge per step and the stage hand-off"),
    clauses=(own_blocks("h", what="every earlier block's keys matter"),),
    presets={
        "tiny": Preset({"B": 2, "S": 12, "D": 16, "H": 2, "E": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 16, "S": 16, "D": 512, "H": 8, "E": 64}, "bfloat16",
                        "PKB's shapes: h (16, 16/cp, 512), 8 heads of 64; latency-bound"),
        "large": Preset({"B": 1, "S": 8192, "D": 2048, "H": 16, "E": 128}, "bfloat16",
                        "a long sequence: the ring's transfers and the attention compute are of one size"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        PREDICTABLE_SEEDS,
        "a `large` preset (S=8192, 16 heads of 128) where the ring's transfers and the attention compute "
        "are of one size, so overlap decides the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("ring_attention_pp", params=(Arg("hidden_states", "h"), Arg("w_qkv"), Arg("w_o"), Arg("num_heads"),
                                        Arg("softmax_scale"), Arg("causal"), Arg("cp_group"), Arg("pp_group")))
