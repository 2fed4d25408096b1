"""Every task of the suite, checked against its own declarations, on real gloo ranks. No hand list of tasks.

The golden test: each world size is ONE launch of W fresh rank processes that loop over every task the
tiny preset allows at that size, x dtype (the tiny one alone at W = 3) x trial (two at the tiny dtype, one
at the others), build the task's mesh groups (once per mesh shape, as the judge's ranks do), run the
reference and save what each rank returned. The pytest process makes every rank's inputs from the same
seeds, runs the task's single-process golden, and compares with the judge's own comparison and the task's
own tolerance; it also checks each output against its declared shape and dtype. At the task's tiny dtype
every reference stays within HALF its tolerance of the golden, so a candidate more exact than the reference
is never rejected (docs/task_contract.md, "Against the truth"; the sweep of record is
benchmarks/tolerance_margins.py at 200 trials, whose ratio this test uses).
"""
from __future__ import annotations

import os
import sys
import tempfile
import traceback
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from multiprocessing import forkserver

from pkb_env.contract import (FAMILIES, GroupCache, GroupInfo, Normal, Replicated, Scalar, Sharded, Tensor,
                              rank_seeds)
from pkb_env.contract.edges import edge_of
from pkb_env.contract.mesh import SHARED
from pkb_env.contract.sized import same_values
from pkb_env.judge.compare import compare_outputs, summarize_mismatches
from pkb_env.task import TaskError, load_reference, load_task, task_names

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from tolerance_margins import error_over_allowed  # noqa: E402

WORLD_SIZES = (2, 3, 4, 8)
TINY_DTYPE_ONLY = (3,)   # an odd split, at the task's tiny dtype: its 16-bit dtypes are checked at 2, 4 and 8


def golden_dtypes(spec, world_size: int) -> tuple[str, ...]:
    return (spec.presets[PRESET].dtype,) if world_size in TINY_DTYPE_ONLY else tuple(spec.dtypes)
TRIALS = (0, 1)   # at the task's tiny dtype; its other dtypes get the first (their rules scale with the dtype)


def trials(spec, dtype: str) -> tuple[int, ...]:
    return TRIALS if dtype == spec.presets[PRESET].dtype else TRIALS[:1]
HALF = 0.5    # the reference's largest error against the golden, as a fraction of the tolerance, at its tiny dtype
PRESET = "tiny"
SECRET = 0x5EED_C0FFEE
LAUNCH_TIMEOUT_S = 300


# -- seeds and inputs (the same derivation in the rank processes and in pytest) --------------------------
def make_inputs(task: str, rank: int, world_size: int, dtype: str, trial: int = 0, groups=None,
                preset: str = PRESET) -> tuple:
    spec = load_task(task)
    seeds = rank_seeds(SECRET, spec.layout(world_size, spec.preset(preset).dims), rank, task, dtype, trial)
    return spec.make_inputs(spec.input_context(rank, world_size, preset, dtype, "cpu", seeds, groups=groups))


def runnable(task: str, world_size: int) -> bool:
    try:
        load_task(task).check_world_size(world_size, PRESET)
    except TaskError:
        return False
    return True


def case_key(task: str, dtype: str, trial: int) -> str:
    return f"{task}/{dtype}/{trial}"


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)


# -- the rank processes -----------------------------------------------------------------------------
def _rank_main(rank: int, world_size: int, init_method: str, out_dir: str, only: tuple[str, ...] | None = None) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo pairs over loopback, whatever the host has
    torch.set_num_threads(1)
    import warnings

    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's rename in torch 2.13
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=120))
    results, case, cache = {}, None, GroupCache()
    try:
        for task in only or task_names():
            if not runnable(task, world_size):
                continue
            spec, solution = load_task(task), load_reference(task)
            groups = cache.groups(spec.layout(world_size, spec.preset(PRESET).dims), rank, spec.group_dims)
            inplace = spec.inplace_positions
            for dtype in golden_dtypes(spec, world_size):
                for trial in trials(spec, dtype):
                    case = case_key(task, dtype, trial)
                    args = make_inputs(task, rank, world_size, dtype, trial, groups)
                    kept = [a for i, a in enumerate(args) if i not in inplace.values()]
                    before = [t.clone() for t in tensors_in(kept)]
                    out = solution(*args)
                    mutated = any(not same_values(a, b) for a, b in zip(before, tensors_in(kept)))  # sparse too
                    updated = {name: args[i] for name, i in inplace.items()}
                    results[case] = {"out": out, "mutated": mutated, "updated": updated}
        dist.barrier()
    except BaseException:
        Path(out_dir, f"error{rank}.txt").write_text(f"rank {rank}, case {case}:\n{traceback.format_exc()}")
        raise
    finally:
        torch.save(results, Path(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def launch(world_size: int, out_dir: Path, only: tuple[str, ...] | None = None) -> list[dict]:
    """One launch of `world_size` fresh gloo ranks, forked by `rank_server()`'s fork server; returns each rank's
    reference outputs, per case (of the tasks in `only`, default every task)."""
    init_method = f"file://{out_dir / 'store'}"  # a FileStore: no port to find, nothing to race for
    ctx = mp.get_context("forkserver")   # call inside `rank_server()`
    procs = [ctx.Process(target=_rank_main, args=(r, world_size, init_method, str(out_dir), only), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(LAUNCH_TIMEOUT_S)
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    errors = "\n".join(f.read_text() for f in sorted(out_dir.glob("error*.txt")))
    codes = [p.exitcode for p in procs]
    assert not hung and all(c == 0 for c in codes), (
        f"world size {world_size}: rank exit codes {codes}" + (" (killed after timeout)" if hung else "")
        + f"\n{errors}")
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


@contextmanager
def rank_server():
    """Where `launch` forks its ranks: a fork server that imported torch and the task loader once. As fresh as
    spawned processes, without 2-3 s of imports per rank (17 ranks over the four world sizes); the server is
    stopped at the end of the block, so that no process of it outlives the block.

    Not this module: the fork server imports its preloads on its own sys.path (Python 3.11 drops the one it is
    given), where the working directory comes first, and from the checkout `tasks` is the task package, not
    tests/tasks; a rank imports this module itself, once it has this process's sys.path."""
    mp.get_context("forkserver").set_forkserver_preload(["torch", "pkb_env.task"])   # before the server starts
    try:
        yield
    finally:
        forkserver._forkserver._stop()


@pytest.fixture(scope="module")
def rank_outputs():
    """{world_size: [per-rank {case: {"out", "mutated"}}]}: one launch per world size, run once for the module."""
    results = {}
    with rank_server(), tempfile.TemporaryDirectory(prefix="pkb_golden_") as tmp:
        for w in WORLD_SIZES:
            if not any(runnable(t, w) for t in task_names()):
                continue
            out_dir = Path(tmp, f"w{w}")
            out_dir.mkdir()
            results[w] = launch(w, out_dir)
    return results


# -- the golden test ---------------------------------------------------------------------------------
# Only the world sizes each task takes: a case that could only skip would be a test that cannot fail.
GOLDEN_CASES = [(t, w, d) for t in task_names() for w in WORLD_SIZES if runnable(t, w)
                for d in golden_dtypes(load_task(t), w)]


@pytest.mark.parametrize("task,world_size,dtype", GOLDEN_CASES,
                         ids=[f"{t}-w{w}-{d}" for t, w, d in GOLDEN_CASES])
def test_reference_equals_golden(rank_outputs, task, world_size, dtype):
    check_golden(rank_outputs[world_size], task, world_size, dtype)


def check_golden(ranks: list[dict], task: str, world_size: int, dtype: str) -> None:
    """Every rank's reference outputs (and in-place results) against the golden's, at the task's checks."""
    spec = load_task(task)
    dims = spec.preset(PRESET).dims
    checks = spec.output_checks(dtype, dims, world_size)
    for trial in trials(spec, dtype):
        case = case_key(task, dtype, trial)
        inputs = [dict(zip(spec.parameters, make_inputs(task, r, world_size, dtype, trial)))
                  for r in range(world_size)]
        expected = spec.golden(inputs, spec.world(dims, world_size, dtype))  # updates InPlace inputs in place
        assert len(expected) == world_size, f"{task}: golden must return one output per rank"
        for rank in range(world_size):
            got = ranks[rank][case]
            assert not got["mutated"], f"{case} rank {rank}: the reference mutated its inputs"
            after = [got["updated"].get(name, value) for name, value in inputs[rank].items()]
            problems = spec.output_problems(got["out"], rank, after, dims, world_size, dtype)
            assert not problems, f"{case} rank {rank}: the reference's output departs from the declaration: {problems}"
            mismatches = compare_outputs(expected[rank], got["out"], checks, case, rank)
            golden_updated = {name: inputs[rank][name] for name in got["updated"]}
            mismatches += compare_outputs(golden_updated, got["updated"], checks, case, rank, root="updated")
            assert not mismatches, summarize_mismatches(mismatches)
            if dtype == spec.presets[PRESET].dtype:
                ratios = error_over_allowed(spec, checks, {"output": expected[rank], "updated": golden_updated},
                                            {"output": got["out"], "updated": got["updated"]})
                over = {path: f"{r:.3f}" for path, r in ratios.items() if not r < HALF}
                assert not over, (f"{case} rank {rank}: the reference's error against the golden reaches {over} of "
                                  f"the tolerance (limit {HALF}): size the tolerance for the reference's own error, "
                                  f"with the reason in the spec")


# -- the spec contract -------------------------------------------------------------------------------
ALL_TASKS = task_names()


def test_suite_has_the_eight_collectives_and_unique_pkb_ids():
    ids = [load_task(t).pkb_id for t in ALL_TASKS if load_task(t).pkb_id is not None]
    assert len(ids) == len(set(ids)), f"two tasks claim one PKB id: {sorted(ids)}"
    assert set(range(1, 9)) <= set(ids), "the eight collective primitives (PKB 1-8) are part of the suite"


@pytest.mark.parametrize("task", ALL_TASKS)
def test_spec_metadata(task):
    spec = load_task(task)
    assert spec.name == task and spec.family in FAMILIES
    assert spec.reference_path is not None and "def solution(" in spec.reference_source
    assert '"""' in spec.reference_source, "the reference states its semantics in a docstring"
    assert spec.title and spec.description and spec.origin and spec.parallelism
    assert all(isinstance(d, str) and len(d) > 20 for d in spec.departures), "departures say what and why"
    # tiny in float32 and bench in bfloat16 wherever the task takes them (complex spectra and sparse products
    # have no bfloat16: float32 at bench; the Kalman filter is float64 only)
    first = spec.dtypes[0]
    assert spec.presets["tiny"].dtype == ("float32" if "float32" in spec.dtypes else first)
    assert spec.presets["bench"].dtype == ("bfloat16" if "bfloat16" in spec.dtypes
                                           else "float32" if "float32" in spec.dtypes else first)
    for w in spec.allowed_world_sizes("tiny"):
        spec.check_world_size(w, "tiny")
    assert spec.allowed_world_sizes("tiny", (2, 4)), f"{task}: the tiny preset must run at world size 2 or 4"
    assert spec.allowed_world_sizes("bench", (2, 4, 8)), f"{task}: bench must run at a GPU world size"


@pytest.mark.parametrize("task", ALL_TASKS)
def test_tolerances_and_costs_evaluate_everywhere(task):
    """Every preset x dtype x world size the task takes has a tolerance with a reason and a cost model."""
    spec = load_task(task)
    for preset in spec.presets:
        dims = spec.preset(preset).dims
        for w in spec.allowed_world_sizes(preset):
            for dtype in spec.dtypes:
                for out in spec.outputs:
                    tol = spec.tolerance(dtype, dims, w, out.name)
                    assert tol.reason and tol.atol >= 0 and tol.rtol >= 0
                model = spec.cost_model(dims, w, dtype)
                assert model.hbm_bytes >= 0 and all(t.size_bytes >= 0 for t in model.comm)
                if w > 1:
                    assert model.comm or model.compute or model.hbm_bytes, f"{task}: the cost model is empty"


def _ranks_tensors(task: str, w: int, dtype: str, trial: int) -> list[dict]:
    spec = load_task(task)
    return [dict(zip(spec.parameters, make_inputs(task, r, w, dtype, trial))) for r in range(w)]


@pytest.mark.parametrize("task", ALL_TASKS)
def test_inputs_are_random_reproducible_and_laid_out_as_declared(task):
    spec = load_task(task)
    w = max(spec.allowed_world_sizes(PRESET, (2, 3, 4)))
    layout = spec.layout(w, spec.preset(PRESET).dims)
    dtype = spec.presets[PRESET].dtype
    first, again, second = (_ranks_tensors(task, w, dtype, t) for t in (0, 0, 1))
    # an edge case rewrites its inputs into a pattern on purpose (equal priorities, values on rounding
    # boundaries): their distribution is the draw's only in a plain call
    edge = edge_of(rank_seeds(SECRET, layout, 0, task, dtype, 0)[SHARED], spec.edges)
    rewritten = set(edge.rewrites) if edge is not None else set()
    for decl in spec.inputs:
        if not isinstance(decl, Tensor):
            continue
        name = decl.name
        for r in range(w):
            x = first[r][name]
            assert same_values(x, again[r][name]), f"{task}.{name}: not reproducible from its seeds"
            assert not same_values(x, second[r][name]) or x.numel() < 2, f"{task}.{name}: same in two trials"
            x = x.coalesce().values() if x.is_sparse else x  # a sparse input's drawn values
            if name in rewritten:
                continue
            if x.numel() > 16:
                assert x.float().unique().numel() > 1, f"{task}.{name}: a constant fill"
            if isinstance(decl.dist, Normal) and x.numel() >= 256 and x.is_floating_point():
                assert abs(x.float().std().item() / decl.dist.std - 1) < 0.2, f"{task}.{name}: not N(0, std)"
        same = {}
        for r in range(w):
            if isinstance(decl.layout, Replicated):
                key = ()
            elif isinstance(decl.layout, Sharded):
                key = ("block", decl.layout.block_index(layout, r))
            else:
                key = tuple(layout.coords(r)[d] for d in decl.layout.scope(layout))
            same.setdefault(key, []).append(first[r][name])
        for key, copies in same.items():
            assert all(same_values(copies[0], c) for c in copies[1:]), f"{task}.{name}: replicas of {key} differ"
        distinct = [c[0] for c in same.values()] if name not in rewritten else []
        for i in range(len(distinct)):
            for j in range(i + 1, len(distinct)):
                assert not same_values(distinct[i], distinct[j]), f"{task}.{name}: two blocks are equal"


def _replicated_scalars(task: str) -> list[str]:
    return [d.name for d in load_task(task).inputs if isinstance(d, Scalar) and isinstance(d.layout, Replicated)]


@pytest.mark.parametrize("task", [t for t in ALL_TASKS if _replicated_scalars(t)])
def test_scalars_agree_across_ranks_and_vary_across_trials(task):
    spec = load_task(task)
    scalars = _replicated_scalars(task)
    w = max(spec.allowed_world_sizes(PRESET, (2, 3, 4)))
    seen = set()
    for trial in range(16):
        per_rank = [[args[n] for n in scalars] for args in _ranks_tensors(task, w, "float32", trial)]
        assert all(p == per_rank[0] for p in per_rank), f"{task}: replicated scalars differ across ranks"
        seen.add(tuple(per_rank[0]))
    assert len(seen) > 1, f"{task}: scalars {scalars} are the same in every trial: {seen}"


@pytest.mark.parametrize("task", ALL_TASKS)
def test_a_rank_cannot_make_a_peers_inputs(task):
    """With its own seeds a rank makes its own inputs; asked for a peer's blocks, it has no seed for them."""
    spec = load_task(task)
    w = max(spec.allowed_world_sizes(PRESET, (2, 3, 4)))
    layout = spec.layout(w, spec.preset(PRESET).dims)
    own = rank_seeds(SECRET, layout, 0, task, "float32", 0)
    private = [d for d in spec.inputs if isinstance(d, Tensor) and not isinstance(d.layout, Replicated)]
    for peer in range(1, w):
        peers = rank_seeds(SECRET, layout, peer, task, "float32", 0)
        for key, seed in own.items():  # shared scopes agree; a scope rank 0 is not in stays unknown to it
            assert peers.get(key, seed) == seed and (key in peers or seed not in peers.values())
        for decl in private:
            scope_peer = layout.scope_key(decl.layout.scope(layout), peer)
            if scope_peer not in own:
                ctx = spec.input_context(peer, w, PRESET, "float32", "cpu", own)
                with pytest.raises(KeyError, match="holds no seed"):
                    spec.make_inputs(ctx)


def test_group_inputs_become_group_records_in_one_process():
    spec = next(load_task(t) for t in ALL_TASKS if load_task(t).group_dims)  # ring_attention_tp at least
    w = spec.allowed_world_sizes(PRESET, (4, 8))[0]
    args = make_inputs(spec.name, 1, w, "float32")
    groups = [a for a in args if isinstance(a, GroupInfo)]
    assert groups and all(1 in g.ranks and g.ranks[g.rank] == 1 for g in groups)


def test_load_task_rejects_unknown_names():
    with pytest.raises(TaskError) as info:
        load_task("all_gatherr")
    message = str(info.value)
    assert "unknown task 'all_gatherr'" in message
    for name in ALL_TASKS:
        assert name in message
    with pytest.raises(TaskError):
        load_task(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -2, 2.0, "4", None, True])
def test_check_world_size_rejects_non_positive_integers(bad):
    with pytest.raises(TaskError, match="positive integer"):
        load_task("all_gather").check_world_size(bad, "tiny")


def test_check_world_size_rejects_unknown_presets():
    with pytest.raises(TaskError, match="no preset 'huge'"):
        load_task("reduce_scatter").check_world_size(2, "huge")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
