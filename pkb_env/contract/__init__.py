"""The task contract (v2): everything a task declares, as data. docs/task_contract.md is the guide.

A task writer imports from here only:

    from pkb_env.contract import (TaskSpec, Preset, WorldSizes, Mesh, Tensor, Scalar, Const, Group, Output,
                                  Replicated, Sharded, PerRank, Normal, Uniform, Integers, ..., Sum, Rounded,
                                  Propagated, Ulps, Exact, Cost, Comm, Compute)

`pkb_env.task` loads the suite (`load_task`, `task_names`); the modules here say what a task is.

.. versionchanged:: 0.2
   Inputs, outputs, tolerances, meshes and costs are declarations (v1 had a free-text input description,
   one tolerance per dtype, and one `Traffic` per task).
"""
from pkb_env.contract.cost import COLLECTIVES, Comm, Compute, Cost, CostModel, Peaks
from pkb_env.contract.distributions import (Bernoulli, Custom, Distribution, Given, Integers, Normal, OneHot,
                                            Permutation, Positive, Uniform, UnitRows)
from pkb_env.contract.expr import Expr, ExprError
from pkb_env.contract.families import FAMILIES
from pkb_env.contract.inputs import InputContext, derive_seed, rank_seeds
from pkb_env.contract.io import (DTYPES, TASK_DTYPE, Const, Group, Input, Output, PerRank, Replicated, Scalar, Sharded,
                                 Tensor)
from pkb_env.contract.mesh import FLAT, GroupCache, GroupInfo, Mesh, MeshLayout, build_groups
from pkb_env.contract.spec import CostContext, Preset, TaskError, TaskSpec, World, WorldSizes
from pkb_env.contract.tolerance import (EXACT, Check, Exact, Fixed, Propagated, Rounded, Rule, Sum, Tolerance,
                                       Ulps)

__all__ = [
    "COLLECTIVES", "Comm", "Compute", "Cost", "CostModel", "Peaks",
    "Bernoulli", "Custom", "Distribution", "Given", "Integers", "Normal", "OneHot", "Permutation", "Positive",
    "Uniform", "UnitRows", "Expr", "ExprError", "FAMILIES", "InputContext", "derive_seed", "rank_seeds",
    "DTYPES", "TASK_DTYPE", "Const", "Group", "Input", "Output", "PerRank", "Replicated", "Scalar", "Sharded", "Tensor",
    "FLAT", "GroupCache", "GroupInfo", "Mesh", "MeshLayout", "build_groups",
    "CostContext", "Preset", "TaskError", "TaskSpec", "World", "WorldSizes",
    "EXACT", "Check", "Exact", "Fixed", "Propagated", "Rounded", "Rule", "Sum", "Tolerance", "Ulps",
]
