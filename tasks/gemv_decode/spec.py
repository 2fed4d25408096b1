"""gemv_decode: the vocabulary-parallel LM head of one decode step, logits gathered (PKB 46).

At decode time the head is a GEMV (one token per sequence) over a weight split by vocabulary rows: each
rank streams its (V, D) block from HBM once and every rank needs all logits (for sampling). Reading the
weight dominates; the gather is small. The levers: a GEMV at HBM bandwidth, and writing each rank's
logits straight into peers' buffers instead of a separate gather launch.
"""
from pkb_env.contract import (Comm, Compute, Cost, Output, Preset, Replicated, Rounded, Sharded, Sum, TaskSpec,
                              Tensor)
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """hidden_states @ weight.T + bias over the whole vocabulary, in float64, rounded once."""
    h = world.assemble(inputs, "hidden_states").double()
    w = world.assemble(inputs, "weight").double()
    b = world.assemble(inputs, "bias").double()
    return world.distribute((h @ w.t() + b).to(inputs[0]["weight"].dtype), "logits")


def cost(c):
    """Per rank: an all-gather of the (B, W*V) logits; 2*B*V*D FLOPs; its weight block read once (the
    hidden states and bias too) and the logits written."""
    return Cost(comm=(Comm("all_gather", c.nbytes("logits")),),
                compute=(Compute(2 * c["B"] * c["V"] * c["D"], "matmul"),),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="gemv_decode",
    title="Vocabulary-parallel LM head at decode (GEMV + all-gather of logits)",
    description="Every rank holds hidden_states (B, D), the same on every rank, and weight (V, D) and bias "
                "(V,), its rows [r*V, (r+1)*V) of a head over a vocabulary of W*V. Every rank must return "
                "the full logits hidden_states @ weight_full.T + bias_full, (B, W*V).",
    family="tensor",
    parallelism="tensor parallel: vocabulary-parallel head (column-parallel over the vocabulary), "
                "logits gathered",
    pkb_id=46,
    origin="vLLM / Megatron-LM vocabulary-parallel LM head (ParallelLMHead: local logits, then all-gather)",
    inputs=(
        Tensor("hidden_states", ("B", "D"), layout=Replicated(), doc="the last hidden state of each sequence"),
        Tensor("weight", ("W * V", "D"), layout=Sharded(0), doc="this rank's vocabulary rows of the head"),
        Tensor("bias", ("W * V",), layout=Sharded(0), doc="this rank's vocabulary entries of the bias"),
    ),
    outputs=(Output("logits", ("B", "W * V"), layout=Replicated(), doc="logits over the whole vocabulary"),),
    golden=golden,
    cost=cost,
    # D unit products accumulated in fp32; the dot product (RMS sqrt(D)) rounded to the dtype, then the
    # bias added and the sum rounded again.
    tolerance_rule=(Sum("D", 1, "float32", what="dot products accumulated in fp32")
                    + Rounded(2, "sqrt(D)", what="the product, and its sum with the bias, each rounded")),
    clauses=(own_blocks("weight", "bias", what="every rank's rows of the head"),),
    presets={
        "tiny": Preset({"B": 2, "V": 16, "D": 32}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 1, "V": 1024, "D": 1024}, "bfloat16",
                        "PKB's shapes: one token, a (1024, 1024) block of the head per rank"),
        "large": Preset({"B": 8, "V": 16384, "D": 8192}, "bfloat16",
                        "8 sequences, 16K vocabulary rows of an 8192-wide head per rank (256 MiB): "
                        "HBM-bound"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "every rank holds its own rows of the head: PKB seeds the weight and bias with rank 0's seed, so "
        "every rank holds the same block and the 'vocabulary' repeats W times",
        "inputs come from secret per-trial seeds (PKB's are fixed per trial and the same on every rank)",
        "a `large` preset (8 sequences, 16K rows of 8192 per rank) where streaming the weight sets the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("gemv_decode", params=(Arg("hidden_states"), Arg("weight_shard", "weight"), Arg("bias_shard", "bias")))
