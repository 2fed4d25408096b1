"""How much room each task's tolerance leaves: the reference against the golden, on CPU or GPU ranks.

For every task (or --task), dtype and world size, run the distributed reference on fresh random inputs and
report the largest error as a fraction of the allowed one, max |got - expected| / (atol + rtol*|expected|),
over every element of every rank and trial, per output (each at its own tolerance; in-place results, as
`updated['name']`, against the state the golden leaves). A correct reference must stay well below 1 (the golden test
fails at 1); a value near 1 means the rule is too tight for the sizes, one far below 0.01 that it may let
wrong answers through. Task writers: run it at `bench` for the world sizes your task takes.

    python benchmarks/tolerance_margins.py --task gemm_allreduce --preset bench --world-size 2 4 8

`--device cuda` runs the ranks on GPUs (NCCL, one GPU each, when there are enough; else gloo with several
ranks per GPU) and the float64 golden on GPU 0: for sizes whose golden a CPU cannot afford (attention over
tens of thousands of tokens at `bench`). Inputs are drawn on the CPU either way, so the values are the same.
Writes a JSON list under $OUT (default ./.out) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.multiprocessing as mp

SECRET = 0x70_1E_5A_9E


NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _rank(rank: int, world: int, store: str, tasks: list[str], preset: str, dtypes: list[str], trials: int,
          out_dir: str, device: str) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ.update(NO_MULTICAST)
    import warnings

    import torch.distributed as dist

    from pkb_env.contract import GroupCache, rank_seeds
    from pkb_env.task import load_reference, load_task

    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(1)
    backend = "gloo"
    if device == "cuda":
        gpus = torch.cuda.device_count()
        torch.cuda.set_device(rank % gpus)
        device, backend = f"cuda:{rank % gpus}", "nccl" if gpus >= world else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    cache, results = GroupCache(), {}
    for task in tasks:
        spec, solution = load_task(task), load_reference(task)
        groups = cache.groups(spec.layout(world, spec.preset(preset).dims), rank, spec.group_dims)
        for dtype in (d for d in dtypes if d in spec.dtypes):  # the dtypes this task takes
            for trial in range(trials):
                seeds = rank_seeds(SECRET, spec.layout(world, spec.preset(preset).dims), rank, task, dtype, trial)
                args = spec.make_inputs(spec.input_context(rank, world, preset, dtype, device, seeds, groups=groups))
                out = _to_cpu(solution(*args))
                updated = {name: args[i].detach().cpu().clone() for name, i in spec.inplace_positions.items()}
                results[(task, dtype, trial)] = {"output": out, "updated": updated}
    torch.save(results, Path(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def margins(tasks: list[str], preset: str, world: int, dtypes: list[str], trials: int,
            device: str = "cpu") -> list[dict]:
    from pkb_env.contract import rank_seeds
    from pkb_env.task import load_task

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(world, str(Path(tmp, "store")), tasks, preset, dtypes, trials, tmp, device),
                 nprocs=world)
        got = [torch.load(Path(tmp, f"rank{r}.pt"), weights_only=False) for r in range(world)]
    rows = []
    for task in tasks:
        spec = load_task(task)
        dims = spec.preset(preset).dims
        for dtype in (d for d in dtypes if d in spec.dtypes):
            checks = spec.output_checks(dtype, dims, world)   # each output's own tolerance, as the judge's
            worst = dict.fromkeys(checks, 0.0)
            for trial in range(trials):
                inputs = []
                for r in range(world):
                    seeds = rank_seeds(SECRET, spec.layout(world, spec.preset(preset).dims), r, task, dtype, trial)
                    args = spec.make_inputs(spec.input_context(r, world, preset, dtype, device, seeds))
                    inputs.append(dict(zip(spec.parameters, args)))
                expected = _to_cpu(spec.golden(inputs, spec.world(dims, world, dtype)))  # updates InPlace inputs
                for r in range(world):
                    mine = {"output": expected[r],
                            "updated": {name: _to_cpu(inputs[r][name]) for name in spec.inplace_positions}}
                    for path, ratio in error_over_allowed(spec, checks, mine, got[r][(task, dtype, trial)]).items():
                        worst[path] = max(worst[path], ratio)
            for path, ratio in worst.items():  # one row per output, each at its own tolerance
                tol = checks[path].tolerance
                rows.append({"task": task, "preset": preset, "world_size": world, "dtype": dtype, "output": path,
                             "max_error_over_allowed": ratio, "atol": tol.atol, "rtol": tol.rtol})
    return rows


def error_over_allowed(spec, checks, expected, got) -> dict:
    """{output path: max |got - expected| / allowed} for one rank, each path at its own tolerance in `checks`;
    both sides {"output": the returned value, "updated": {input name: its final value}}. tests/tasks/test_golden.py
    asserts it below 0.5 at every task's tiny dtype."""
    return {path: _ratio(e, g, checks[path].tolerance) for path, (e, g) in _by_output(spec, expected, got).items()}


def _by_output(spec, expected, got) -> dict:
    """{output path: (expected, got)} for one rank's compared values: every path of the task's outputs
    (`output`, `output[2]`, `output[4]['key']`) and in-place results (`updated['name']`), each side given as
    {"output": the returned value, "updated": {input name: its final value}}."""
    return {path: (_at(expected, path), _at(got, path)) for path, decl in spec.output_paths.items()
            if decl.kind not in ("dict", "none")}


def _at(value, path: str):
    """The value at `path` ("output[4]['ratio_min']"); None below a None (an output absent on this rank)."""
    root, rest = re.match(r"(output|updated)(.*)", path).groups()
    value = value[root]
    for index, key in re.findall(r"\[(?:(\d+)|'([^']*)')\]", rest):
        if value is None:
            return None
        value = value[int(index)] if index else value[key]
    return value


def _ratio(expected, got, tol) -> float:
    """max |got - expected| / (atol + rtol |expected|); infinities must match (inf/inf counts 0)."""
    if expected is None:
        return 0.0 if got is None else float("inf")
    if not isinstance(expected, torch.Tensor):  # a Python scalar output
        if not isinstance(got, (int, float)):
            return float("inf")
        expected, got = torch.tensor(expected), torch.tensor(got)
    if expected.is_complex():  # both parts, each at the tolerance (as the judge compares them)
        expected, got = torch.view_as_real(expected), torch.view_as_real(got)
    if not expected.is_floating_point() or tol.exact:
        return 0.0 if torch.equal(expected, got) else float("inf")
    e, g = expected.double(), got.double()
    same = (e == g) | (e.isnan() & g.isnan())
    ratio = ((g - e).abs() / (tol.atol + tol.rtol * e.abs())).masked_fill(same, 0.0)
    return float(ratio.nan_to_num(nan=float("inf")).max()) if ratio.numel() else 0.0


def main() -> None:
    from pkb_env.task import load_task, task_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", nargs="*", default=None, help="default: every task")
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--world-size", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--dtype", nargs="+", default=["bfloat16", "float16", "float32"])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the ranks and the golden run (cuda: the golden on GPU 0, in float64)")
    parser.add_argument("--table", action="store_true", help="also print the worst margin per task and world size")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", ".out"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for world in args.world_size:
        tasks = [t for t in (args.task or task_names())
                 if load_task(t).world_size_problem(world, args.preset) is None]
        rows += margins(tasks, args.preset, world, args.dtype, args.trials, args.device)
    for r in rows:
        print(f"{r['task']:22s} {r['preset']:6s} W={r['world_size']}  {r['dtype']:9s} {r['output']:12s} "
              f"max error / allowed = {r['max_error_over_allowed']:.3f}  (atol {r['atol']:.3g}, rtol {r['rtol']:.3g})")
    (out / "tolerance_margins.json").write_text(json.dumps(rows, indent=1))
    if args.table:
        print(worst_table(rows, args.world_size))


def worst_table(rows: list[dict], worlds: list[int]) -> str:
    """Markdown: per task, the worst margin over its outputs and dtypes at each world size ('-': not taken),
    and a mark where it is at or above half the allowance (the margin test's limit)."""
    worst: dict[str, dict[int, float]] = {}
    for r in rows:
        cell = worst.setdefault(r["task"], {})
        cell[r["world_size"]] = max(cell.get(r["world_size"], 0.0), r["max_error_over_allowed"])
    lines = ["| task | " + " | ".join(f"W={w}" for w in worlds) + " |", "|---|" + "---|" * len(worlds)]
    for task in sorted(worst):
        cells = [f"{worst[task][w]:.3f}" + (" **over**" if worst[task][w] >= 0.5 else "") if w in worst[task] else "-"
                 for w in worlds]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
