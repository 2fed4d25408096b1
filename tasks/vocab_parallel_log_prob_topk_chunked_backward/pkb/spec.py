"""PKB 84 (vocab_parallel_log_prob_topk_chunked_backward) as PKB states it: pkb-env's function on inputs that
never tie, PKB's tolerance, in float32 (tasks/_pkb.py, `without_ties`; docs/pkb_compat.md).

Float32 only, though PKB's corpus runs in bfloat16 (GPT-5.5's 85 asserts bf16 logits and is refused for it): ties at
the k-th are not the obstacle (PKB keeps every logit equal to the k-th, as pkb-env does), the top-p cut is. In
bfloat16 PKB's reference decides it on bfloat16 probabilities, and that rounding put PKB's own bf16 reference past
PKB's tolerance of the exact filter in about a tenth of the tokens with these draws (`VOCAB_FLOAT32` in
tasks/_pkb.py gives the measurement). Keeping the cut clear of the threshold would need each token's top k over the
whole vocabulary, which no rank holds when it draws its block.
"""
from dataclasses import replace

from pkb_env.tasks._pkb import VOCAB_FLOAT32, without_ties
from pkb_env.tasks.vocab_parallel_log_prob_topk_chunked_backward import spec as task

WHY = ("pkb-env's integer-logit edge case (ties at the top-k boundary) and its tie rule give way to PKB's "
       "standard-normal logits with the target's raised")
SPEC = without_ties(task.SPEC, draws={}, why=WHY, float32_only=VOCAB_FLOAT32)
PKB = replace(task.PKB, differs="", variant=None)
