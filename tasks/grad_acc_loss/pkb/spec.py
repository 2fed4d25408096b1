"""PKB 23 (grad_acc_loss) as PKB states it: the task's function, computed in the loss's dtype and returned in it, PKB's
tolerance (tasks/_pkb.py, `in_inputs_dtype`; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.tasks._pkb import in_inputs_dtype
from pkb_env.tasks.grad_acc_loss import spec as task

SPEC = in_inputs_dtype(task.SPEC, ("normalized_loss", "loss_sum", "grad_loss"),
                       why="the products, their sum over ranks and the gradient in the loss's dtype (bf16's 8 bits "
                           "for a sum of W products of up to M N tokens times a loss)")
PKB = replace(task.PKB, returns=None, differs="", variant=None)
