"""PKB 58 (openclip_contrastive_loss) as PKB states it: the task's function, computed in the features' dtype and
returned in it, PKB's tolerance (tasks/_pkb.py, `in_inputs_dtype`; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.tasks._pkb import in_inputs_dtype
from pkb_env.tasks.openclip_contrastive_loss import spec as task

SPEC = in_inputs_dtype(task.SPEC, ("loss",),
                       why="the logits, log-sigmoids and the loss in the features' dtype (a bf16 loss of ~16 rounds "
                           "to steps of 0.06)")
PKB = replace(task.PKB, returns=None, differs="", variant=None)
