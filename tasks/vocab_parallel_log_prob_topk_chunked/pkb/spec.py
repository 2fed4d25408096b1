"""PKB 83 (vocab_parallel_log_prob_topk_chunked) as PKB states it: pkb-env's function on inputs that never tie, PKB's
tolerance (tasks/_pkb.py, `without_ties`; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.tasks._pkb import without_ties
from pkb_env.tasks.vocab_parallel_log_prob_topk_chunked import spec as task

WHY = ("pkb-env's integer-logit edge case (ties at the top-k boundary) and its tie rule give way to PKB's "
       "standard-normal logits with the target's raised")
SPEC = without_ties(task.SPEC, draws={}, why=WHY)
PKB = replace(task.PKB, differs="", variant=None)
