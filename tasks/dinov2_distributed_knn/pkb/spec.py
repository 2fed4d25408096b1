"""PKB 79 (dinov2_distributed_knn) as PKB states it: pkb-env's function on inputs that never tie, PKB's
tolerance (tasks/_pkb.py, `without_ties`; docs/pkb_compat.md)."""
from dataclasses import replace

import torch

from pkb_env.contract import Custom, UnitRows
from pkb_env.tasks._pkb import without_ties
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
                    why=WHY)
PKB = replace(task.PKB, differs="", variant=None)
