"""PKB 24 (load_balancing_loss_fn) as PKB states it: pkb-env's function on inputs that never tie, PKB's
tolerance (tasks/_pkb.py, `without_ties`; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.tasks._pkb import without_ties
from pkb_env.tasks.load_balancing_loss import spec as task

WHY = ("pkb-env's tied_logits edge case (logits on a grid of 0.5) and its tie rule (the lower expert index "
       "first) give way to PKB's standard-normal logits")
SPEC = without_ties(task.SPEC, draws={}, why=WHY)
PKB = replace(task.PKB, differs="", variant=None)
