"""PKB 47 (fsdp_step_e2e) as PKB states it: the FSDP step of PKB's ReLU model, PKB's distributions and tolerance
(tasks/_pkb_mlp.py; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.tasks._pkb_mlp import relu_variant
from pkb_env.tasks.fsdp_step_e2e import spec as task

SPEC = relu_variant(task.SPEC, weights=("flat_param_shard",), moments=("exp_avg_shard", "exp_avg_sq_shard"))
PKB = replace(task.PKB, differs="", variant=None)
