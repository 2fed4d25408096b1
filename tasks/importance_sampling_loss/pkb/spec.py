"""PKB 25 (importance_sampling_loss) as PKB states it: the task's function with the log-softmax in the logits'
dtype and the log-probabilities returned in it, PKB's tolerance, in float32 only (tasks/_pkb.py, `in_inputs_dtype`;
docs/pkb_compat.md).

In float32 PKB's function is the task's. In bfloat16 PKB's reference takes F.cross_entropy of bf16 logits, so each
log-probability (about -log V) is off by up to half a bf16 step, 2^-6 at |log p| of 4 to 8, and exp() carries that into
the ratios and per-token losses as a relative error of up to about 2%, past PKB's own rtol of 1e-2. Measured: PKB's
reference judged on this variant with bfloat16 allowed (CPU ranks, tiny, W = 4, 4 runs) was wrong in all 4, pg off by
up to 2.7% (max abs err 0.085) and ratio_max by up to 2.0%. PKB's statement in bfloat16 fails its own reference, so
the variant states it in float32.
"""
from dataclasses import replace

from pkb_env.tasks._pkb import in_inputs_dtype
from pkb_env.tasks.importance_sampling_loss import spec as task

SPEC = in_inputs_dtype(task.SPEC, ("logprobs",),
                       why="F.cross_entropy of the logits in their dtype, so the log-probabilities (and the ratios, "
                           "losses and metrics made from them) carry its rounding",
                       float32_only="in bfloat16 PKB's own reference is up to 2-3% from the exact ratios and "
                                    "per-token losses, past PKB's rtol of 1e-2 (the module docstring)")
PKB = replace(task.PKB, returns=tuple(replace(r, to=None, text="") if r.target == "logprobs" else r
                                      for r in task.PKB.returns), differs="", variant=None)
