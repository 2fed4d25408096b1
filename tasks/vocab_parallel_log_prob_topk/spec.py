"""vocab_parallel_log_prob_topk: token log-probabilities under a top-k / top-p filter, vocabulary split
over ranks (PKB 82).

NeMo-RL's GRPO scores every generated token under the policy with the sampler's filter, so that the
log-probabilities match the distribution the tokens were drawn from. The logits come from a
tensor-parallel output layer, split over the vocabulary, while the filter needs whole rows. PKB's
reference (and this one) swaps the split with an all-to-all of the whole logits; the lever is that only
each rank's top-k logits per token can survive the filter, so a fused kernel can select them locally and
move k+1 values per token instead of V/W.
"""
from pkb_env.tasks import _vocab_topk as vocab

SPEC = vocab.task(
    name="vocab_parallel_log_prob_topk",
    title="Vocab-parallel log-probabilities under top-k / top-p",
    description=vocab.FORWARD,
    parallelism="tensor parallel: vocabulary-parallel output layer, filtered log-probs (NeMo-RL GRPO)",
    pkb_id=82,
    origin="NeMo-RL GRPO: log-probabilities of sampled tokens with top-k / top-p (distributed model utils)",
    inputs=(vocab.LOGITS, vocab.TARGET, vocab.TP_GROUP, vocab.TOP_K, vocab.TOP_P_INPUT),
    outputs=(vocab.LOG_PROBS,),
    golden=vocab.golden_log_probs,
    cost=vocab.forward_cost,
    tolerance=vocab.LOG_PROB,
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import TOP_P  # noqa: E402

PKB = Pkb('vocab_parallel_log_prob_topk', differs=TOP_P, variant="pkb")
