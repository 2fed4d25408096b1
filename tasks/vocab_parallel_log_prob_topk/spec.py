"""vocab_parallel_log_prob_topk: token log-probabilities under a top-k / top-p filter, vocabulary split
over ranks (PKB 82).

NeMo-RL's GRPO scores every generated token under the policy with the sampler's filter, so that the
log-probabilities match the distribution the tokens were drawn from. The logits come from a
tensor-parallel output layer, split over the vocabulary, while the filter needs whole rows. PKB's
reference (and this one) swaps the split with an all-to-all of the whole logits; the lever is that only
each rank's top-k logits per token can survive the filter, so a fused kernel can select them locally and
move k+1 values per token instead of V/W.
"""
from pkb_env.contract import Output, Replicated, TaskSpec
from pkb_env.tasks import _vocab_topk as vocab


def cost(c):
    return vocab.cost(c, vector_per_logit=2)   # a top-k selection (compare) and the exponent of survivors


SPEC = TaskSpec(
    name="vocab_parallel_log_prob_topk",
    title="Vocab-parallel log-probabilities under top-k / top-p",
    description="Every rank holds the logits (B, S, V/W) of its block of the vocabulary (rank r: token ids "
                "r*V/W to (r+1)*V/W - 1) and the targets (B, S). Every rank must return, as float32 (B, S), "
                "each target's log-probability under the softmax over the whole vocabulary of the filtered "
                f"logits (-inf where the filter removes the target): {vocab.FILTER_RULE}.",
    family="vocab",
    parallelism="tensor parallel: vocabulary-parallel output layer, filtered log-probs (NeMo-RL GRPO)",
    pkb_id=82,
    origin="NeMo-RL GRPO: log-probabilities of sampled tokens with top-k / top-p (distributed model utils)",
    inputs=(vocab.LOGITS, vocab.TARGET, vocab.TP_GROUP, vocab.TOP_K, vocab.TOP_P_INPUT),
    outputs=(Output("log_probs", ("B", "S"), dtype="float32", layout=Replicated(),
                    doc="log softmax(filtered logits)[target], per token"),),
    golden=vocab.golden_log_probs,
    cost=cost,
    tolerance_rule=vocab.LOG_PROB,
    presets=vocab.presets(),
    dtypes=("float32", "bfloat16", "float16"),
    world_sizes=vocab.SPLIT_TOKENS,
    departures=vocab.DEPARTURES,
)
