"""vocab_parallel_log_prob_topk_chunked_backward: the gradient of PKB 83 with respect to the logits (PKB 84).

The backward of the filtered GRPO log-probabilities: for each token, grad_output times (one-hot of the
target minus the filtered probabilities), on the tokens the filter keeps, returned in the logits' own
vocabulary split. PKB's reference (and this one) moves the whole logits to a token split and the whole
float32 gradient back. Levers: each rank can finish its own vocabulary block once it knows every token's
kept set and normaliser, which only the ranks' top-k candidates decide, so nothing of size V needs to
cross a link at all.
"""
import torch

from pkb_env.contract import Output, Sharded, Sum
from pkb_env.tasks import _vocab_topk as vocab


def golden(inputs, world):
    """grad_output * (onehot(target) - softmax(filtered)) on the kept logits, in float64 on the global rows."""
    filtered, keep, target = vocab.filtered_float64(inputs, world)
    grad_output = world.assemble(inputs, "grad_output").double()
    onehot = torch.nn.functional.one_hot(target, filtered.shape[-1]).double()
    grad = (onehot - filtered.softmax(dim=-1)) * grad_output.unsqueeze(-1) * keep
    return world.distribute(grad.float(), "grad_logits")


def cost(c):
    return vocab.cost(c, vector_per_logit=4)   # top-k selection, exponent, scale, write


# The probabilities come from the survivors' normaliser in fp32 (a relative error that every element
# shares) and multiply grad_output (standard normal: up to ~4 over a few thousand tokens); the target's
# element is grad_output * (1 - p), which cancels when p is near 1, so its error is absolute.
TOLERANCE = Sum("K", "4 / K", "float32", what="probabilities over the <= K survivors in fp32, times "
                                               "|grad_output| (up to ~4)") \
    + Sum(3, 1, "float32", what="the exponent x - max, exp and 1 - p, in fp32")

SPEC = vocab.task(
    name="vocab_parallel_log_prob_topk_chunked_backward",
    title="Backward of vocab-parallel log-probabilities under top-k / top-p, in chunks",
    description="Every rank holds the logits (B, S, V/W) of its block of the vocabulary (rank r: token ids "
                "r*V/W to (r+1)*V/W - 1), the targets (B, S) and grad_output (B, S). With p the softmax over "
                "the whole vocabulary of the filtered logits, every rank must return its block (B, S, V/W) "
                "float32 of grad_output * (onehot(target) - p), zero where the filter drops the logit: "
                f"{vocab.FILTER_RULE}. The reference works through the flattened tokens in chunks of "
                "B*chunk_size; the result does not depend on the chunking.",
    parallelism="tensor parallel: vocabulary-parallel output layer, backward of filtered log-probs",
    pkb_id=84,
    origin="NeMo-RL GRPO: backward of the top-k / top-p filtered log-probabilities, chunked over tokens",
    inputs=(vocab.LOGITS, vocab.TARGET, vocab.GRAD_OUTPUT, vocab.TP_GROUP, vocab.TOP_K, vocab.TOP_P_INPUT,
            vocab.CHUNK),
    outputs=(Output("grad_logits", ("B", "S", "V"), dtype="float32", layout=Sharded(2),
                    doc="this rank's vocabulary block of d loss / d logits"),),
    golden=golden,
    cost=cost,
    tolerance=TOLERANCE,
    departures=("grad_output is random (PKB's is a fixed linspace from -1 to 1 in bf16) and in the task dtype",
                vocab.CHUNK_RULE,
                "float32 gradients of the whole vocabulary block are returned: at `large` a rank's block is "
                "1000 MiB at W = 1 and 500 MiB at W = 2, above what the judge takes from one call (256 MiB), so "
                "`large` runs at W >= 4"),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import TOP_P  # noqa: E402

PKB = Pkb('vocab_parallel_log_prob_topk_chunked_backward', differs=TOP_P, variant="pkb")
