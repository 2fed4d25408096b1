"""vocab_parallel_log_prob_topk_chunked: PKB 82 a chunk of tokens at a time (PKB 83).

The same log-probabilities as `vocab_parallel_log_prob_topk`, computed over chunks of B*chunk_size tokens
so that full-vocabulary rows never exist for all tokens at once (the memory a 128K-token vocabulary needs
for long sequences); the signature of the kernel published with the NeMo-RL case study. The output does
not depend on the chunking. Levers: pipeline the chunks (one chunk's exchange under the previous chunk's
filter), and move each rank's top-k candidates instead of whole rows.
"""
from pkb_env.contract import Output, Replicated, TaskSpec
from pkb_env.tasks import _vocab_topk as vocab


def cost(c):
    return vocab.cost(c, vector_per_logit=2)   # a top-k selection (compare) and the exponent of survivors


SPEC = TaskSpec(
    name="vocab_parallel_log_prob_topk_chunked",
    title="Vocab-parallel log-probabilities under top-k / top-p, in chunks",
    description="Every rank holds the logits (B, S, V/W) of its block of the vocabulary (rank r: token ids "
                "r*V/W to (r+1)*V/W - 1) and the targets (B, S). Every rank must return, as float32 (B, S), "
                "each target's log-probability under the softmax over the whole vocabulary of the filtered "
                f"logits (-inf where the filter removes the target): {vocab.FILTER_RULE}. The reference "
                "works through the flattened tokens in chunks of B*chunk_size; the result does not depend "
                "on the chunking.",
    family="vocab",
    parallelism="tensor parallel: vocabulary-parallel output layer, filtered log-probs in token chunks",
    pkb_id=83,
    origin="NeMo-RL GRPO: log-probabilities of sampled tokens with top-k / top-p, chunked over tokens",
    inputs=(vocab.LOGITS, vocab.TARGET, vocab.TP_GROUP, vocab.TOP_K, vocab.TOP_P_INPUT, vocab.CHUNK),
    outputs=(Output("log_probs", ("B", "S"), dtype="float32", layout=Replicated(),
                    doc="log softmax(filtered logits)[target], per token"),),
    golden=vocab.golden_log_probs,
    cost=cost,
    tolerance_rule=vocab.LOG_PROB,
    presets=vocab.presets(),
    dtypes=("float32", "bfloat16", "float16"),
    world_sizes=vocab.SPLIT_TOKENS,
    departures=vocab.DEPARTURES + (
        "chunk_size is PKB's rule (max(W, S/4) rounded up to a multiple of W, at most S) written as a size "
        "expression, so chunks of B*chunk_size tokens always split evenly over the ranks",
    ),
)
