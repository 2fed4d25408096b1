"""The PKB variants (tasks/<name>/pkb/: PKB's problem as PKB states it, docs/pkb_compat.md) against their goldens, on
real gloo ranks, as tests/tasks/test_golden.py checks the suite (its launch and checks, over the variants only, at
fewer sizes: VARIANT_SIZES); and the variants' declarations."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from pkb_env.task import load_task, pkb_variants, task_names
from tasks.test_golden import PRESET, check_golden, launch, rank_server, runnable

VARIANTS = pkb_variants()
# Fewer than the suite's cases (W = 2, 3, 4, 8, every dtype): a variant reuses the suite's machinery, judges only
# PKB-format files, and its tolerance is PKB's 1e-2; W = 2 and 4, the tiny dtype, and bfloat16 where taken at W = 4.
VARIANT_SIZES = (2, 4)


def variant_dtypes(task: str, world_size: int) -> tuple[str, ...]:
    spec = load_task(task)
    extra = ("bfloat16",) if world_size == 4 and "bfloat16" in spec.dtypes else ()
    return tuple(dict.fromkeys((spec.presets[PRESET].dtype, *extra)))   # once each (a bfloat16-only variant)


CASES = [(t, w, d) for t in VARIANTS for w in VARIANT_SIZES if runnable(t, w) for d in variant_dtypes(t, w)]


@pytest.fixture(scope="module")
def variant_outputs():
    results = {}
    with rank_server(), tempfile.TemporaryDirectory(prefix="pkb_variants_") as tmp:
        for w in VARIANT_SIZES:
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


ADAM_STEPS = ("ddp", "zero1_optimizer_shard", "zero2_optimizer_shard_grad", "fsdp_step_e2e",
              "fused_adam_grad_unshard_allgather")


@pytest.mark.parametrize("task", ADAM_STEPS)
def test_pkbs_adam_steps_take_every_tensor_in_the_runs_dtype(task):
    """PKB's harness makes the parameters and Adam's moments in the run's dtype as it makes the gradients or X and y
    (pkb-env's tasks keep them fp32 on purpose): PKB files asserting their parameters are bfloat16 (GPT-5.5's 41-43,
    48) or reading the gradient in the master weights' dtype (Claude Opus 4.7's 44) were rejected at bfloat16."""
    from pkb_env.contract import Tensor
    from pkb_env.contract.io import resolve_dtype

    spec = load_task(f"pkb_env.tasks.{task}.pkb")
    assert "bfloat16" in spec.dtypes
    floats = {d.name: resolve_dtype(d.dtype, "bfloat16") for d in spec.inputs if isinstance(d, Tensor)}
    assert set(floats.values()) == {torch.bfloat16}, floats
    assert any(resolve_dtype(d.dtype, "bfloat16") == torch.float32 for d in load_task(task).inputs
               if isinstance(d, Tensor)), "the task itself keeps its fp32 master state"


# PKB's corpus runs in bfloat16, and files asserting it (GPT-5.5's 80 and 85, Claude Opus 4.7's 83, on one H100)
# are judged in float32 by these variants; each must say what a bfloat16 statement would decide by rounding.
FLOAT32_BECAUSE = {"dinov2_distributed_knn": "similarities are bfloat16 values",
                   "vocab_parallel_log_prob_topk": "top-p cut",
                   "vocab_parallel_log_prob_topk_chunked": "top-p cut",
                   "vocab_parallel_log_prob_topk_chunked_backward": "top-p cut"}


@pytest.mark.parametrize("task", sorted(FLOAT32_BECAUSE))
def test_a_top_k_variant_kept_to_float32_says_what_bfloat16_rounding_would_decide(task):
    spec = load_task(f"pkb_env.tasks.{task}.pkb")
    assert spec.dtypes == ("float32",)
    why = [d for d in spec.departures if d.startswith("float32 only: ")]
    assert len(why) == 1 and FLOAT32_BECAUSE[task] in why[0], spec.departures
    assert "a rank draws only its own" in why[0]       # why no draw can keep them clear: the sharded input's whole
