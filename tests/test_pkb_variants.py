"""The PKB variants (tasks/<name>/pkb/: PKB's problem as PKB states it, docs/pkb_compat.md) against their goldens, on
real gloo ranks, as tests/test_tasks_golden.py checks the suite (its launch and checks, over the variants only);
and the variants' declarations."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from pkb_env.task import load_task, pkb_variants, task_names
from test_tasks_golden import (PRESET, WORLD_SIZES, check_golden, golden_dtypes, launch, rank_server,  # noqa: F401
                               runnable)

VARIANTS = pkb_variants()
CASES = [(t, w, d) for t in VARIANTS for w in WORLD_SIZES if runnable(t, w) for d in golden_dtypes(load_task(t), w)]


@pytest.fixture(scope="module")
def variant_outputs():
    results = {}
    with rank_server(), tempfile.TemporaryDirectory(prefix="pkb_variants_") as tmp:
        for w in WORLD_SIZES:
            if any(runnable(t, w) for t in VARIANTS):
                out_dir = Path(tmp, f"w{w}")
                out_dir.mkdir()
                results[w] = launch(w, out_dir, VARIANTS)
    return results


@pytest.mark.parametrize("task,world_size,dtype", CASES, ids=[f"{t.split('.')[-2]}-w{w}-{d}" for t, w, d in CASES])
def test_variant_reference_equals_golden(variant_outputs, task, world_size, dtype):
    check_golden(variant_outputs[world_size], task, world_size, dtype)


@pytest.mark.parametrize("task", VARIANTS)
def test_a_variant_states_its_problem_and_maps_pkbs_call(task):
    spec = load_task(task)
    owner = load_task(task.split(".")[-2])
    assert spec.pkb_id == owner.pkb_id and spec.pkb is not None and spec.pkb.name == owner.pkb.name
    assert spec.name not in task_names(), "a variant is not part of the suite"
    assert spec.allowed_world_sizes(PRESET, (2, 4)), f"{task}: PKB's statement runs at world size 2 or 4"
