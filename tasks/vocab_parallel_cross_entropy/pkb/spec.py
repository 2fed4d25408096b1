"""PKB 73 (vocab_parallel_cross_entropy_loss) as PKB states it: the task's function, computed in the logits' dtype
and returned in it, PKB's tolerance (tasks/_pkb.py, `in_inputs_dtype`; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.tasks._pkb import in_inputs_dtype
from pkb_env.tasks.vocab_parallel_cross_entropy import spec as task

SPEC = in_inputs_dtype(task.SPEC, ("loss",),
                       why="the maximum, the exponentials, their sum and the logarithm in the logits' dtype (bf16 "
                           "rounds a loss of ~6 to steps of 0.03)")
PKB = replace(task.PKB, returns=None, differs="", variant=None)
