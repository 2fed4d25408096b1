"""PKB 79 (dinov2_distributed_knn) as PKB states it: pkb-env's function on inputs that never tie, PKB's
tolerance, in float32 (tasks/_pkb.py, `without_ties`; docs/pkb_compat.md).

Float32 only, though PKB's corpus runs in bfloat16 (GPT-5.5's 80 asserts bf16 features and is refused for it): in
bfloat16 PKB's similarities are bfloat16 values, and at PKB's bench sizes they tie within the top k of every query
(`KNN_FLOAT32` in tasks/_pkb.py gives the measurement). The labels are returned in similarity order, so a tie
anywhere in the top k, not only at the k-th, changes the answer; keeping 200 similarities of each query more than a
bfloat16 step apart would need each query against every rank's training block, and a rank draws only its own.
"""
from dataclasses import replace

import torch

from pkb_env.contract import Custom, UnitRows
from pkb_env.tasks._pkb import KNN_FLOAT32, without_ties
from pkb_env.tasks.dinov2_distributed_knn import spec as task


def _unit_columns(gen, shape, dtype, env):
    """PKB's training features: standard-normal rows of D, L2-normalised, stored transposed (D, L)."""
    x = torch.randn(shape, generator=gen, dtype=torch.float32, device=gen.device)
    return torch.nn.functional.normalize(x, dim=0).to(dtype)


_UNIT_COLUMNS = Custom(_unit_columns, "standard normal, each column (a training feature) of unit L2 norm",
                       kinds=frozenset({"float"}))

WHY = ('unit-norm standard-normal features as PKB draws them (pkb-env draws integers in [-2, 3), so that '
       'similarities tie, and states that the lower global train index comes first)')
SPEC = without_ties(task.SPEC, draws={"test_features_rank": UnitRows(), "train_features_rank_T": _UNIT_COLUMNS},
                    why=WHY, float32_only=KNN_FLOAT32)
PKB = replace(task.PKB, differs="", variant=None)
