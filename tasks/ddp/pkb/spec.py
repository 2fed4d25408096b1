"""PKB 40 (ddp) as PKB states it: the DDP step of PKB's ReLU model, PKB's distributions and tolerance
(tasks/_pkb_mlp.py; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.tasks._pkb_mlp import relu_variant
from pkb_env.tasks.ddp import spec as task

SPEC = relu_variant(task.SPEC, weights=("W1", "b1", "W2", "b2"),
                    moments=tuple(f"{m}_{n}" for m in ("exp_avg", "exp_avg_sq") for n in ("W1", "b1", "W2", "b2")))
PKB = replace(task.PKB, differs="", variant=None)
