"""PKB 41 (zero1_optimizer_shard) as PKB states it: the ZeRO step of PKB's ReLU model, returning the updated state only,
PKB's distributions and tolerance (tasks/_pkb_mlp.py; docs/pkb_compat.md)."""
from dataclasses import replace

from pkb_env.contract import Ret
from pkb_env.tasks._pkb_mlp import relu_variant
from pkb_env.tasks.zero1_optimizer_shard import spec as task

STATE = ("W1", "b1", "W2", "b2", "exp_avg_part", "exp_avg_sq_part")
SPEC = relu_variant(task.SPEC, weights=STATE[:4], moments=STATE[4:], state_only_outputs=True)
PKB = replace(task.PKB, differs="", unmapped="", variant=None, returns=tuple(Ret(name) for name in STATE))
