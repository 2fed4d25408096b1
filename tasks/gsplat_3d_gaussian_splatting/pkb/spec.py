"""PKB 61 (gsplat_3d_gaussian_splatting) as PKB states it: the task's projection with PKB's gaussian_ids, PKB's
tolerance, in float32 (docs/pkb_compat.md).

PKB's reference, as gsplat's distributed rasterization, adds to each visible Gaussian's index the offset of the rank
that receives it (rank * N: its camera's owner), so a rank's gaussian_ids are its own offset plus each Gaussian's
index on the rank that holds it, in the task's row order (by source rank, then index); the task's are global ids
(source rank * N + index). Everything else is the task's: PKB's reference projects as the task states (the Jacobian
clamped at 1.3 times the field of view, the same visibility and radii); measured on CPU ranks at tiny, W = 4, with its
ids made global, PKB's own reference was correct on the task in 3 of 3 runs, the edge case beyond_clamp included.
So the variant keeps the task's inputs and edge case. Float32 only: PKB projects in the inputs' dtype, and in bfloat16
its rounding decides which Gaussians are visible and so the outputs' length (the task's departures), which no
tolerance can compare.
"""
from dataclasses import replace

from pkb_env.tasks._pkb import PKB_VARIANT_OWN_INPUTS, float32_presets, pkb_rule, pkb_tolerance
from pkb_env.tasks.gsplat_3d_gaussian_splatting import spec as task


def golden(inputs, world):
    """The task's golden with PKB's ids: each row's index on its source rank plus this rank's offset."""
    n = inputs[0]["means"].shape[0]
    return [(cameras, ids % n + rank * n, *rest) for rank, (cameras, ids, *rest) in
            enumerate(task.golden(inputs, world))]


IDS = "gaussian_ids (n,) int32"
if IDS not in task.SPEC.description:
    raise ValueError(f"gsplat's variant restates {IDS!r} of the task's description, which no longer says it")
SPEC = replace(
    task.SPEC, name="pkb_env.tasks.gsplat_3d_gaussian_splatting.pkb",
    title=f"PKB 61 as PKB states it: {task.SPEC.title}",
    description=task.SPEC.description.replace(IDS, f"{IDS} as PKB numbers them (the Gaussian's index on its own rank "
                                                   f"plus this rank's offset, rank * N)")
    + " Outputs within PKB's tolerance (allclose, atol = rtol = 1e-2) are correct; integers exactly.",
    outputs=tuple(pkb_tolerance(replace(o, doc="the Gaussian's index on its own rank + this rank * N (PKB's ids)")
                                if o.name == "gaussian_ids" else o) for o in task.SPEC.outputs),
    golden=golden,
    presets=float32_presets(task.SPEC.presets),
    dtypes=("float32",), tolerance_rule=pkb_rule(("float32",)),
    departures=(PKB_VARIANT_OWN_INPUTS,
                "gaussian_ids as PKB's reference numbers them: the Gaussian's index on the rank holding it plus the "
                "offset of the rank receiving it (the task's are global ids)",
                "float32 only: in bfloat16 PKB's projection's rounding decides visibility, so the outputs' length"),
    reference_path=None, pkb=None)
PKB = replace(task.PKB, differs="", variant=None)
