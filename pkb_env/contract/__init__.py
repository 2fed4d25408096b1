"""The task contract: everything a task declares, as data. docs/task_contract.md is the guide.

A task writer imports from here only:

    from pkb_env.contract import (TaskSpec, Preset, WorldSizes, Mesh, Tensor, Scalar, Const, Group, Length, Output,
                                  Replicated, Sharded, PerRank, Normal, Uniform, Integers, ..., Sum, Rounded,
                                  Propagated, Relative, Ulps, Exact, Cost, Comm, Compute)

`pkb_env.task` loads the suite (`load_task`, `task_names`); the modules here say what a task is.

.. versionchanged:: 0.2
   Inputs, outputs, tolerances, meshes and costs are declarations (v1 had a free-text input description,
   one tolerance per dtype, and one `Traffic` per task).
.. versionchanged:: 0.2
   `Length` (ragged sizes drawn per call, per rank), `FromInputs` (inputs computed from a rank's other
   inputs, such as a forward's saved statistics), `Custom(..., reads=...)` (random inputs drawn given
   others, such as logits whose target survives a filter), `WorldSizes(splits=...)` (sizes the ranks share
   out evenly) and `Relative` (rounding that scales with each value).
.. versionchanged:: 0.3
   `Edge` (edge cases the statement defines, drawn into one call in two and into every step's trials).
.. versionchanged:: 0.4
   Contract v3, inputs: meshes sized by the preset's dims, `Group` and `Comm` over several mesh dims,
   `Sparse` inputs, float64 costed on its own peaks, and `Routing` (top-k routing drawn jointly).
   Contract v3, the output side: `InPlace` (inputs updated in place, compared after the call), outputs of
   kind scalar, none and dict, `OnRanks` (outputs on a set of ranks), `max_shape` (variable-length outputs
   with a bound), `dtype="complex"` and the `Fft` rule, `order_by` (float rows in any order, keyed by an
   integer output), `ties` (the tie rule in the prompt) and `identical` (replicas bit for bit).
.. versionchanged:: 0.5
   `Pkb` (a module-level `PKB` beside `SPEC`): PKB's call and outputs mapped onto the task's, so that a
   PKB-format file is judged unchanged (docs/pkb_compat.md).
   `Clause` (a rule of the statement with a test of whether a trial's inputs exercise it; every step's trials
   reach every declared one), edge cases that rewrite a `Routing`'s gate logits or several inputs at once
   (`Edge(..., also=...)`), and rewrites that see the inputs their input reads (`EdgeDraw.given`).
"""
from pkb_env.contract.clauses import Clause, Trial
from pkb_env.contract.cost import COLLECTIVES, Comm, Compute, Cost, CostModel, Peaks
from pkb_env.contract.distributions import (Bernoulli, Custom, Distribution, FromInputs, Given, Integers, Normal,
                                            OneHot, Permutation, Positive, Uniform, UnitRows)
from pkb_env.contract.edges import Edge, EdgeDraw
from pkb_env.contract.expr import Expr, ExprError
from pkb_env.contract.families import FAMILIES
from pkb_env.contract.inputs import InputContext, derive_seed, rank_seeds
from pkb_env.contract.io import (DTYPES, TASK_COMPLEX, TASK_DTYPE, Const, Group, InPlace, Input, Length, OnRanks, Output,
                                 PerRank, Replicated, Scalar, Sharded, Tensor)
from pkb_env.contract.mesh import FLAT, GroupCache, GroupInfo, Mesh, MeshLayout, build_groups
from pkb_env.contract.pkb import Arg, Computed, Harness, Listed, Pkb, PkbCall, Ret, Sizes
from pkb_env.contract.routing import Routed, RoutedLoad, Routing
from pkb_env.contract.sparse import Sparse
from pkb_env.contract.spec import CostContext, Preset, TaskError, TaskSpec, World, WorldSizes
from pkb_env.contract.tolerance import (EXACT, Check, Exact, Fft, Fixed, Propagated, Relative, Rounded, Rule, Sum,
                                        Tolerance, Ulps)

__all__ = [
    "Clause", "Trial",
    "COLLECTIVES", "Comm", "Compute", "Cost", "CostModel", "Peaks",
    "Bernoulli", "Custom", "Distribution", "FromInputs", "Given", "Integers", "Normal", "OneHot", "Permutation",
    "Positive", "Uniform", "UnitRows", "Edge", "EdgeDraw", "Expr", "ExprError", "FAMILIES", "InputContext",
    "derive_seed", "rank_seeds",
    "DTYPES", "TASK_COMPLEX", "TASK_DTYPE", "Const", "Group", "InPlace", "Input", "Length", "OnRanks", "Output", "PerRank", "Replicated", "Scalar", "Sharded",
    "Tensor", "FLAT", "GroupCache", "GroupInfo", "Mesh", "MeshLayout", "build_groups",
    "Arg", "Computed", "Harness", "Listed", "Pkb", "PkbCall", "Ret", "Sizes",
    "Routed", "RoutedLoad", "Routing", "Sparse",
    "CostContext", "Preset", "TaskError", "TaskSpec", "World", "WorldSizes",
    "EXACT", "Check", "Exact", "Fft", "Fixed", "Propagated", "Relative", "Rounded", "Rule", "Sum", "Tolerance", "Ulps",
]
