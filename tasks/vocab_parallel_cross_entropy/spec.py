"""vocab_parallel_cross_entropy: the cross-entropy loss of logits split over the vocabulary (PKB 73).

Megatron-LM's `_VocabParallelCrossEntropy` forward: the output layer is column-parallel, so each rank holds
the logits of its block of the vocabulary for every token. The loss per token is logsumexp over the whole
vocabulary minus the target's logit, which needs three reductions over the ranks: the maximum (for a
stable exponent), the target's logit (only its owner has it) and the sum of exponentials. Levers: one
fused pass over the logits (they are read once, never written back), the three small reductions merged
into one (an online log-sum-exp carries max and sum together), and overlapping it with the local pass.
"""
from pkb_env.contract import (Comm, Compute, Cost, Group, Integers, Output, Preset, Replicated, Sharded, Sum,
                              TaskSpec, Tensor)
from pkb_env.tasks._clauses import own_blocks, sixteen_bit


def golden(inputs, world):
    """logsumexp over the full vocabulary minus the target logit, in float64 on the global logits."""
    logits = world.assemble(inputs, "vocab_parallel_logits").double()
    target = world.assemble(inputs, "target")
    loss = logits.logsumexp(dim=-1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return world.distribute(loss.float(), "loss")


def cost(c):
    """The output is replicated and depends on every rank's block, so every rank must receive at least one
    float32 per token from the others: one all-reduce of (B, S) float32 (a log-sum-exp combine carries the
    maximum and the sum together; the target's logit folds into its owner's partial). Each rank reads its
    logits once and does a few vector operations per logit (compare, subtract, exponentiate, add)."""
    tokens = c["B"] * c["S"]
    return Cost(
        comm=(Comm("all_reduce", tokens * 4),),
        compute=(Compute(4 * tokens * c["V"] / c["W"], "vector"),),
        memory_bytes=c.io_bytes(),
    )


# The logits are exact in the dtype and the loss is computed in float32, so rounding enters only there: the
# normaliser is a sum of V exponentials that, scaled by it, are V probabilities summing to 1; fp32 rounding
# of that sum is a relative error of the normaliser, which the log turns into the same absolute error.
TOLERANCE = Sum("V", "1 / V", "float32", what="softmax normaliser (V exponentials summing to 1, in fp32)")

SPEC = TaskSpec(
    name="vocab_parallel_cross_entropy",
    title="Vocab-parallel cross-entropy loss",
    description="Every rank holds the logits (B, S, V/W) of its block of the vocabulary (rank r: token ids "
                "r*V/W to (r+1)*V/W - 1) and the targets (B, S). Every rank must return the loss per token, "
                "logsumexp over all V logits minus the target's logit, as float32 (B, S). Compute in float32 "
                "or wider: the tolerance is float32's.",
    family="vocab",
    parallelism="tensor parallel: vocabulary-parallel output layer (Megatron-LM)",
    pkb_id=73,
    origin="Megatron-LM tensor_parallel/cross_entropy.py (_VocabParallelCrossEntropy forward)",
    inputs=(
        Tensor("vocab_parallel_logits", ("B", "S", "V"), layout=Sharded(2),
               doc="logits of this rank's vocabulary block"),
        Tensor("target", ("B", "S"), dtype="int64", dist=Integers(0, "V"), layout=Replicated(),
               doc="target token ids over the whole vocabulary"),
        Group("group", "world", doc="the tensor-parallel group the vocabulary is split over"),
    ),
    outputs=(Output("loss", ("B", "S"), dtype="float32", layout=Replicated(),
                    doc="logsumexp(logits) - logits[target], per token"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("vocab_parallel_logits", what="the log-sum-exp runs over every rank's block"),
             sixteen_bit("fp32_loss", "computed in float32 or wider: a 16-bit input's log-sum-exp not taken in "
                         "its own dtype")),
    presets={
        "tiny": Preset({"B": 2, "S": 8, "V": 48}, "float32", "CPU ranks, milliseconds; W = 2, 3, 4, 6, 8"),
        "bench": Preset({"B": 8, "S": 1024, "V": 512}, "bfloat16",
                        "PKB's shapes: logits (8, 1024, 512/W); the reductions' latency dominates"),
        "large": Preset({"B": 4, "S": 4096, "V": 128256}, "bfloat16",
                        "Llama-3's vocabulary over 16K tokens (4.2 GB of bf16 logits): reading the logits "
                        "from HBM dominates, so one fused pass decides the time"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "the targets are random per trial (PKB's are (13 * position + 7 + trial) mod V, a pattern a candidate "
        "can reproduce) and the logits come from secret per-rank seeds",
        "the reference returns a new tensor and leaves the logits untouched (PKB subtracts the maximum from "
        "the caller's logits in place)",
        "the loss is float32, computed in float32 as Megatron-LM does (PKB computes and returns it in the "
        "logits' dtype, where bf16 rounds a loss of ~6 to steps of 0.03)",
        "the process group is declared (the whole world) and passed in; PKB passes None",
        "a `large` preset (Llama-3's 128256-token vocabulary, 16K tokens) where reading the logits dominates",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb, Ret  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import in_dtype  # noqa: E402

PKB = Pkb("vocab_parallel_cross_entropy_loss",
          params=(Arg("vocab_parallel_logits", to="clone"), Arg("target"), Arg("group")),
          returns=(Ret("loss", to="float32", text="cast to float32: PKB returns the logits' dtype"),),
          differs=in_dtype("the log-sum-exp and the loss", "the loss", "bf16 rounds a loss of ~6 to steps of 0.03",
                           "the log-sum-exp and the loss"),
          variant="pkb")
