"""vocab_parallel_log_prob_topk_chunked: PKB 82 a chunk of tokens at a time (PKB 83).

The same log-probabilities as `vocab_parallel_log_prob_topk`, computed over chunks of B*chunk_size tokens
so that full-vocabulary rows never exist for all tokens at once (the memory a 128K-token vocabulary needs
for long sequences); the signature of the kernel published with the NeMo-RL case study. The output does
not depend on the chunking. Levers: pipeline the chunks (one chunk's exchange under the previous chunk's
filter), and move each rank's top-k candidates instead of whole rows.
"""
from pkb_env.tasks import _vocab_topk as vocab

SPEC = vocab.task(
    name="vocab_parallel_log_prob_topk_chunked",
    title="Vocab-parallel log-probabilities under top-k / top-p, in chunks",
    description=vocab.FORWARD + " The reference works through the flattened tokens in chunks of B*chunk_size; "
                                "the result does not depend on the chunking.",
    parallelism="tensor parallel: vocabulary-parallel output layer, filtered log-probs in token chunks",
    pkb_id=83,
    origin="NeMo-RL GRPO: log-probabilities of sampled tokens with top-k / top-p, chunked over tokens",
    inputs=(vocab.LOGITS, vocab.TARGET, vocab.TP_GROUP, vocab.TOP_K, vocab.TOP_P_INPUT, vocab.CHUNK),
    outputs=(vocab.LOG_PROBS,),
    golden=vocab.golden_log_probs,
    cost=vocab.forward_cost,
    tolerance=vocab.LOG_PROB,
    departures=(vocab.CHUNK_RULE,),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import TOP_P  # noqa: E402

PKB = Pkb('vocab_parallel_log_prob_topk_chunked', differs=TOP_P, variant="pkb")
