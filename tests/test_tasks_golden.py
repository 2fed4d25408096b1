"""Every task's distributed reference equals its single-process golden on every rank, on real gloo ranks.

Process starts are kept out of the hot path: each world size is one launch of W spawned rank processes that
loop over every task x dtype x seed, run the reference and `torch.save` what each rank returned. The pytest
process regenerates every rank's inputs from the same seeds, runs `golden`, and compares.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from pkb_env.task import (DTYPES, TaskError, Tolerance, WorldSizes, derive_seed, load_reference, load_task,
                          task_names)

WORLD_SIZES = (2, 3, 4)
TRIALS = (0, 1)
PRESET = "tiny"
SECRET = 0x5EED_C0FFEE
LAUNCH_TIMEOUT_S = 120
EXPECTED_TASKS = {"all_reduce", "all_gather", "broadcast", "reduce", "scatter", "gather", "reduce_scatter",
                  "all_to_all"}


# -- seeds and inputs (the same derivation in the rank processes and in pytest) --------------------------
def seeds(task: str, dtype: str, trial: int, rank: int) -> tuple[int, int]:
    """(per-rank seed, shared seed): the first differs by rank, the second is equal on all ranks."""
    return (derive_seed(SECRET, task, dtype, trial, "rank", rank),
            derive_seed(SECRET, task, dtype, trial, "shared"))


def make_inputs(task: str, rank: int, world_size: int, dtype: str, trial: int = 0, preset: str = PRESET):
    spec = load_task(task)
    seed, shared = seeds(task, dtype, trial, rank)
    return spec.make_inputs(spec.input_context(rank, world_size, preset, dtype, "cpu", seed=seed,
                                               shared_seed=shared))


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
def _rank_main(rank: int, world_size: int, init_method: str, out_dir: str) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo pairs over loopback, whatever the host has
    torch.set_num_threads(1)
    import warnings

    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's rename in torch 2.13
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    results, case = {}, None
    try:
        for task in task_names():
            if not runnable(task, world_size):
                continue
            solution = load_reference(task)
            for dtype in load_task(task).dtypes:
                for trial in TRIALS:
                    case = case_key(task, dtype, trial)
                    args = make_inputs(task, rank, world_size, dtype, trial)
                    before = [t.clone() for t in tensors_in(args)]
                    out = solution(*args)
                    mutated = any(not torch.equal(a, b) for a, b in zip(before, tensors_in(args)))
                    results[case] = {"out": out, "mutated": mutated}
        dist.barrier()
    except BaseException:
        Path(out_dir, f"error{rank}.txt").write_text(f"rank {rank}, case {case}:\n{traceback.format_exc()}")
        raise
    finally:
        torch.save(results, Path(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def launch(world_size: int, out_dir: Path) -> list[dict]:
    """One launch of `world_size` spawned gloo ranks; returns each rank's reference outputs, per case."""
    init_method = f"file://{out_dir / 'store'}"  # a FileStore: no port to find, nothing to race for
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank_main, args=(r, world_size, init_method, str(out_dir)), daemon=True)
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
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(world_size)]


@pytest.fixture(scope="module")
def rank_outputs():
    """{world_size: [per-rank {case: {"out", "mutated"}}]}: the three launches, run once for the module."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="pkb_golden_") as tmp:
        for w in WORLD_SIZES:
            out_dir = Path(tmp, f"w{w}")
            out_dir.mkdir()
            results[w] = launch(w, out_dir)
    return results


# -- comparison --------------------------------------------------------------------------------------
def assert_matches(got, expected, tol: Tolerance, where: str) -> None:
    if expected is None:
        assert got is None, f"{where}: expected None, got {type(got).__name__}"
        return
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), f"{where}: structure differs"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_matches(g, e, tol, f"{where}[{i}]")
        return
    assert isinstance(got, torch.Tensor), f"{where}: expected a tensor, got {type(got).__name__}"
    assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{where}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
    if tol.exact:
        same = torch.equal(got.contiguous().view(torch.uint8), expected.contiguous().view(torch.uint8))
        assert same, f"{where}: not bit-exact ({(got != expected).sum().item()} elements differ)"
        return
    g, e = got.double(), expected.double()
    err = (g - e).abs() - (tol.atol + tol.rtol * e.abs())
    bad = int((err > 0).sum())
    assert bad == 0, (f"{where}: {bad} elements outside atol={tol.atol} rtol={tol.rtol}; "
                      f"max |got-expected| = {(g - e).abs().max().item():.3g}")


# -- the golden test ---------------------------------------------------------------------------------
GOLDEN_CASES = [(t, w, d) for t in task_names() for w in WORLD_SIZES for d in load_task(t).dtypes]


@pytest.mark.parametrize("task,world_size,dtype", GOLDEN_CASES,
                         ids=[f"{t}-w{w}-{d}" for t, w, d in GOLDEN_CASES])
def test_reference_equals_golden(rank_outputs, task, world_size, dtype):
    if not runnable(task, world_size):
        pytest.skip(f"{task} does not take world size {world_size}")
    spec = load_task(task)
    for trial in TRIALS:
        case = case_key(task, dtype, trial)
        inputs = [make_inputs(task, r, world_size, dtype, trial) for r in range(world_size)]
        expected = spec.golden(inputs, world_size)
        assert len(expected) == world_size, f"{task}: golden must return one output per rank"
        for rank in range(world_size):
            got = rank_outputs[world_size][rank][case]
            assert not got["mutated"], f"{case} rank {rank}: the reference mutated its inputs"
            assert_matches(got["out"], expected[rank], spec.tolerance(dtype), f"{case} rank {rank}")


# -- the spec contract -------------------------------------------------------------------------------
ALL_TASKS = task_names()


def test_suite_has_the_eight_collectives():
    assert EXPECTED_TASKS <= set(ALL_TASKS)
    ids = {load_task(t).pkb_id: t for t in EXPECTED_TASKS}
    assert sorted(ids) == list(range(1, 9)), f"PKB ids of the collectives: {ids}"


@pytest.mark.parametrize("task", ALL_TASKS)
def test_spec_metadata(task):
    spec = load_task(task)
    assert spec.name == task
    assert spec.reference_path is not None and "def solution(" in spec.reference_source
    assert '"""' in spec.reference_source, "the reference states its semantics in a docstring"
    assert set(spec.presets) >= {"tiny", "bench"}
    assert spec.presets["tiny"].dtype == "float32" and spec.presets["bench"].dtype == "bfloat16"
    for dtype in spec.dtypes:
        assert dtype in DTYPES
        assert dtype in spec.tolerances and spec.tolerances[dtype].reason
    assert spec.family and spec.parallelism and spec.origin and spec.inputs_doc and spec.outputs_doc


@pytest.mark.parametrize("task", ALL_TASKS)
def test_inputs_are_random_per_seed_and_per_rank(task):
    w = 3
    for dtype in load_task(task).dtypes:
        a = list(tensors_in(make_inputs(task, 0, w, dtype, trial=0)))
        b = list(tensors_in(make_inputs(task, 0, w, dtype, trial=1)))
        peer = list(tensors_in(make_inputs(task, 1, w, dtype, trial=0)))
        again = list(tensors_in(make_inputs(task, 0, w, dtype, trial=0)))
        assert a, f"{task}: no tensor inputs"
        for x, y, z, x2 in zip(a, b, peer, again):
            assert x.dtype == DTYPES[dtype]
            assert torch.equal(x, x2), f"{task}: inputs are not reproducible from their seeds"
            assert x.unique().numel() > 100 and 0.8 < x.float().std() < 1.2, (
                f"{task}: input does not look like standard-normal noise (a constant or patterned fill?)")
            assert not torch.equal(x, y), f"{task}: two seeds gave the same inputs"
            assert not torch.equal(x, z), f"{task}: ranks 0 and 1 got the same inputs"


@pytest.mark.parametrize("task", ALL_TASKS)
def test_shared_draws_agree_across_ranks(task):
    """Non-tensor arguments (roots) are equal on every rank of a trial and are not always the same value."""
    w = 4
    seen = set()
    for trial in range(16):
        per_rank = [[a for a in make_inputs(task, r, w, "float32", trial) if not isinstance(a, torch.Tensor)]
                    for r in range(w)]
        assert all(p == per_rank[0] for p in per_rank), f"{task}: shared arguments differ across ranks"
        for a in per_rank[0]:
            assert type(a) is int and 0 <= a < w, f"{task}: root {a!r} is not a Python int in [0, {w})"
        seen.add(tuple(per_rank[0]))
    if seen != {()}:
        assert len(seen) > 1, f"{task}: the root is the same in every trial: {seen}"


# nccl-tests S (bytes) and bus factor per collective, for n ranks and per-rank chunk bytes c = M*N*elem.
NCCL_TESTS = {
    "all_reduce": (lambda n, c: c, lambda n: 2 * (n - 1) / n),
    "all_gather": (lambda n, c: n * c, lambda n: (n - 1) / n),
    "reduce_scatter": (lambda n, c: n * c, lambda n: (n - 1) / n),
    "all_to_all": (lambda n, c: n * c, lambda n: (n - 1) / n),
    "broadcast": (lambda n, c: c, lambda n: 1.0),
    "reduce": (lambda n, c: c, lambda n: 1.0),
    "scatter": (lambda n, c: n * c, lambda n: (n - 1) / n),
    "gather": (lambda n, c: n * c, lambda n: (n - 1) / n),
}


@pytest.mark.parametrize("task", ALL_TASKS)
def test_traffic_follows_nccl_tests(task):
    spec = load_task(task)
    if task not in NCCL_TESTS:
        pytest.skip(f"{task} is not one of the eight collective primitives")
    size_of, factor = NCCL_TESTS[task]
    for preset in ("tiny", "bench"):
        dims = spec.presets[preset].dims
        for dtype in spec.dtypes:
            elem = DTYPES[dtype].itemsize
            for n in range(2, 9):
                tr = spec.traffic(n, dims, elem)
                assert tr.collective == task
                assert tr.size_bytes > 0 and tr.bus_bytes > 0 and tr.latency_steps >= 1
                assert tr.size_bytes == size_of(n, dims["M"] * dims["N"] * elem), f"{task} n={n}: S"
                assert abs(tr.bus_bytes - factor(n) * tr.size_bytes) < 1, f"{task} n={n}: bus bytes"


def test_load_task_rejects_unknown_names():
    with pytest.raises(TaskError) as info:
        load_task("all_gatherr")
    message = str(info.value)
    assert "unknown task 'all_gatherr'" in message
    for name in ALL_TASKS:
        assert name in message
    with pytest.raises(TaskError):
        load_task(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -2, 2.0, "4", None])
def test_check_world_size_rejects_non_positive_integers(bad):
    with pytest.raises(TaskError, match="positive integer"):
        load_task("all_gather").check_world_size(bad, "tiny")


def test_check_world_size_explains_limits():
    spec = load_task("reduce_scatter")
    spec.check_world_size(8, "bench")  # allowed
    limited = dataclasses.replace(spec, world_sizes=WorldSizes(minimum=2, maximum=4, divides=("M",)))
    with pytest.raises(TaskError, match=r"cannot run at world size 1: needs at least 2 ranks"):
        limited.check_world_size(1, "tiny")
    with pytest.raises(TaskError, match=r"takes at most 4 ranks"):
        limited.check_world_size(8, "tiny")
    with pytest.raises(TaskError, match=r"M=64 is not divisible by world size 3"):
        limited.check_world_size(3, "tiny")
    with pytest.raises(TaskError, match="no preset 'huge'"):
        spec.check_world_size(2, "huge")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
