"""ulysses_attention: one attention layer with Ulysses sequence parallelism, end to end (PKB 39).

Every rank holds a block of the sequence and the whole layer's weights. It projects its positions to q, k,
v for all heads, trades positions for heads in an all-to-all (so each rank holds every position of H/W
heads), attends locally, trades back in a second all-to-all, and projects its positions with w_o.
Levers: overlap the all-to-alls with the projections (chunk by heads: send head block j as soon as it is
projected, project the output as head blocks arrive), fuse the layout changes into the GEMMs' epilogue
and prologue, and pick the exchange by size (at W=2 a ring of key/value blocks moves half the bytes).
"""
from pkb_env.contract import Compute, Const, Cost, Group, Normal, Output, Preset, Replicated, Sharded, TaskSpec, Tensor
from pkb_env.tasks._attention import (PREDICTABLE_SEEDS, attention, attention_flops, context_exchange,
                                      layer_tolerance)
from pkb_env.tasks._clauses import own_blocks

WEIGHT_STD = 0.02  # an initialisation-sized weight, the scale PKB gives the projections of 55 and 56


def golden(inputs, world):
    """Full-sequence attention in float64 on the assembled hidden states, projected, rounded once."""
    h = world.assemble(inputs, "h").double()
    args = inputs[0]
    batch, seq, _ = h.shape
    qkv = (h @ args["w_qkv"].double().t()).view(batch, seq, 3, args["num_heads"], -1)
    attn, _ = attention(*qkv.unbind(2), None, args["causal"])
    out = attn.reshape(batch, seq, -1) @ args["w_o"].double().t()
    return world.distribute(out.to(inputs[0]["h"].dtype), "out")


def cost(c):
    """Per rank: the projections of its positions and its share of the attention (matmuls); the least
    exchange of blocks that lets every query see every key (`context_exchange`: a ring's W-1 blocks of
    one (B, S/W, H, E) tensor, or Ulysses' all-to-all of q, k, v and the output, whichever moves fewer
    bytes); every input and output once in HBM."""
    b, block, d, heads, e = c["B"], c["S"] // c["W"], c["D"], c["H"], c["E"]
    return Cost(
        comm=(context_exchange(c, b * block * heads * e * c.elem, "world", heads),),
        compute=(Compute(2 * b * block * d * 4 * heads * e, "matmul"),
                 Compute(attention_flops(b, heads, e, c["S"], causal=False) / c["W"], "matmul")),
        memory_bytes=c.io_bytes(),
    )


TOLERANCE = layer_tolerance(WEIGHT_STD, "6", "q, k, v, scores, probabilities and the attention output")

SPEC = TaskSpec(
    name="ulysses_attention",
    title="Ulysses attention layer (sequence parallel, end to end)",
    description="An attention layer over a sequence split into W contiguous blocks: every rank holds h "
                "(B, S/W, D) and the whole layer's weights, and must return its block of "
                "softmax(q k^T / sqrt(E)) v projected by w_o, where q, k, v = h w_qkv^T over all positions.",
    family="sequence",
    parallelism="sequence parallel (Ulysses): all-to-all from sequence- to head-sharded and back",
    pkb_id=39,
    origin="DeepSpeed-Ulysses attention, as VeOmni and verl write it (gather_seq_scatter_heads around attention)",
    inputs=(
        Tensor("h", ("B", "S", "D"), layout=Sharded(1), doc="hidden states of this rank's positions"),
        Tensor("w_qkv", ("3 * H * E", "D"), dist=Normal(std=WEIGHT_STD), layout=Replicated(),
               doc="the QKV projection, rows [q; k; v], head-major within each"),
        Tensor("w_o", ("D", "H * E"), dist=Normal(std=WEIGHT_STD), layout=Replicated(), doc="the output projection"),
        Group("group", "world"),
        Const("num_heads", dim="H"),
        Const("causal", False),
    ),
    outputs=(Output("out", ("B", "S", "D"), layout=Sharded(1), doc="the layer output of this rank's positions"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("h", what="every block's keys matter"),),
    presets={
        "tiny": Preset({"B": 2, "S": 16, "D": 32, "H": 8, "E": 4}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 16, "S": 16, "D": 512, "H": 8, "E": 64}, "bfloat16",
                        "PKB's shapes: h (16, 16/W, 512), 8 heads of 64; latency-bound"),
        "large": Preset({"B": 1, "S": 8192, "D": 2048, "H": 16, "E": 128}, "bfloat16",
                        "a long sequence: the projections and attention dominate, the all-to-alls are large "
                        "enough to hide behind them"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        PREDICTABLE_SEEDS,
        "the weights are the same on every rank, as a layer's are; PKB draws them per rank, so each "
        "sequence block was projected with different weights",
        "the weights have std 0.02 (PKB's scale in 55 and 56); PKB's unit-variance weights make q.k scores "
        "of RMS ~500, a softmax that is a hard argmax",
        "a `large` preset (S=8192, 16 heads of 128) where the all-to-alls can hide behind the GEMMs",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("ulysses_attention_e2e", params=(Arg("hidden_states", "h"), Arg("w_qkv"), Arg("w_o"), Arg("group"),
                                            Arg("num_heads"), Arg("causal")),
          differs="PKB's reference hands its local attention (B, S, H/W, E) without moving the heads before the "
                  "sequence, so each position attends over this rank's H/W heads rather than over the sequence; "
                  "pkb-env's is attention over the sequence, per head", variant="pkb")
