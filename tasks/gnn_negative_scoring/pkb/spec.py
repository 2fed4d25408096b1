"""PKB 69 (gnn_negative_scoring) as PKB states it: pkb-env's function on inputs that never tie, PKB's
tolerance (tasks/_pkb.py, `without_ties`; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.contract import Normal
from pkb_env.tasks._pkb import without_ties
from pkb_env.tasks.gnn_negative_scoring import spec as task

WHY = ('standard-normal scores (pkb-env draws integers, so that negatives tie with the positive, and states that '
       'a tie ranks ahead)')
SPEC = without_ties(task.SPEC, draws={"pos_score": Normal(), "neg_score": Normal()}, why=WHY)
PKB = replace(task.PKB, differs="", variant=None)
