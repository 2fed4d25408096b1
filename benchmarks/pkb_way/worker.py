"""One job of ParallelKernelBench's harness, re-implemented for one pkb-env task (our own code).

PKB judges a candidate by launching, for every trial, a fresh `torchrun` job for the reference and then
one for the candidate; each rank of a job runs this flow (after PKB's own scripts/worker.py):

  1. TORCH_CUDA_ARCH_LIST=9.0 unless set, and a per-rank TORCH_EXTENSIONS_DIR=<base>/pkb_rank_<rank>
     (so every rank compiles its own copy of a load_inline extension; the cache survives across jobs);
  2. import the solution file in-process with importlib (a CUDA candidate compiles here, at import);
  3. init the NCCL process group from torchrun's environment (eager, device_id=cuda:<rank>) and
     torch.cuda.set_device(local_rank);
  4. build the inputs (here: our task contract, seeds from the trial number as PKB derives them:
     42 + rank + trial*1_000_003, shared 42 + trial*1_000_003);
  5. call solution once; torch.cuda.synchronize(); barrier; save the outputs to DIR/rank_<r>.pt
     (tensor -> .detach().cpu(); tuple/list -> {"output_i": ...}; dict -> same keys);
  6. with --measure-perf, PKB's perf loop (utils/performance.py): groups = clones of the first tensor
     argument, 1 group if it is >= 3 x L2 else min(max(2, 3*L2 // bytes + 1), 128); 500 warm-up calls
     cycling the groups, synchronize, 100 timed calls with 101 CUDA events on the current stream (no host
     sync, no barrier inside the loop); per-rank mean ms -> DIR/perf_rank_<r>.json;
  7. destroy the process group.

PKB imports the solution before the backend init (step 2 before 3); so does this worker.

L2 size: PKB reads `torch.cuda.get_device_properties(i).l2_cache_size`, an attribute torch does not have
(it is `L2_cache_size`), so PKB always falls back to 50 MiB; this worker does the same by default and
records the real size beside it (--l2 real uses the real size instead).

Besides PKB's files, every rank writes DIR/phases_rank_<r>.json: wall-clock timestamps (time.time()) at
each step, so that the driver can split a launch's wall time into start-up, torch import, solution
import (compile), NCCL init, inputs, first call, save, perf and teardown.

    python3 -m torch.distributed.run --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29600 \
        benchmarks/pkb_way/worker.py --solution tasks/all_reduce/reference.py --task all_reduce \
        --world-size 1 --trial 0 --out /tmp/job --measure-perf
"""
from __future__ import annotations

import time

_T_PROCESS = time.time()  # before any heavy import: the driver subtracts its launch time from this

import argparse
import importlib.util
import json
import os
import sys

# NVLink multicast stays off in every process (the machines we run on forbid it).
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

PKB_DEFAULT_L2_BYTES = 50 * 1024 * 1024
PKB_MAX_INPUT_GROUPS = 128
SEED_BASE = 42
TRIAL_STRIDE = 1_000_003


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="One PKB-style job (reference or candidate) for a pkb-env task; "
                                            "run under torchrun.")
    p.add_argument("--solution", required=True, help="the Python file defining solution(...)")
    p.add_argument("--task", required=True, help="pkb-env task name, e.g. all_reduce")
    p.add_argument("--world-size", type=int, required=True, help="must equal torchrun's WORLD_SIZE")
    p.add_argument("--trial", type=int, required=True, help="trial number (drives the input seeds)")
    p.add_argument("--out", required=True, help="directory for rank_<r>.pt, perf_rank_<r>.json, phases")
    p.add_argument("--measure-perf", "--measure_perf", dest="measure_perf", action="store_true",
                   help="run PKB's perf loop (500 warm-up + 100 timed calls) after the correctness call")
    p.add_argument("--preset", default="bench", help="task preset for the input sizes (default: bench)")
    p.add_argument("--dtype", default=None, help="input dtype (default: the preset's)")
    p.add_argument("--extensions-base", default=None,
                   help="base of the per-rank TORCH_EXTENSIONS_DIR (default: $PKB_TORCH_EXTENSIONS_BASE, else "
                        "$TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions)")
    p.add_argument("--warmup", type=int, default=500, help="warm-up calls (PKB: 500)")
    p.add_argument("--iters", type=int, default=100, help="timed calls (PKB: 100)")
    p.add_argument("--l2", choices=("pkb", "real"), default="pkb",
                   help="L2 size for the input groups: 'pkb' = PKB's effective 50 MiB fallback, 'real' = device")
    args = p.parse_args(argv)
    if args.world_size < 1:
        p.error("--world-size must be >= 1")
    if args.warmup < 0 or args.iters < 1:
        p.error("--warmup must be >= 0 and --iters >= 1")
    return args


def torchrun_env(world_size_arg: int) -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from torchrun's variables, checked against --world-size."""
    missing = [k for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise SystemExit(f"worker.py: {', '.join(missing)} not set: run it under torchrun "
                         f"(python3 -m torch.distributed.run --nproc-per-node N ... worker.py ...)")
    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    if world != world_size_arg:
        raise SystemExit(f"worker.py: --world-size {world_size_arg} but torchrun started {world} ranks")
    return rank, local_rank, world


def extensions_dir(base: str | None, rank: int) -> str:
    base = (base or os.environ.get("PKB_TORCH_EXTENSIONS_BASE") or os.environ.get("TORCH_EXTENSIONS_DIR")
            or os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions"))
    return os.path.join(base, f"pkb_rank_{rank}")


def import_solution(path: str):
    """Import the file as a module in this process (as PKB does) and return its `solution`."""
    path = os.path.abspath(path)
    spec = importlib.util.spec_from_file_location("pkb_solution_module", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"worker.py: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, "solution", None)
    if not callable(fn):
        raise SystemExit(f"worker.py: {path} defines no callable `solution`")
    return fn


def trial_seeds(spec, rank: int, world: int, trial: int) -> dict[str, int]:
    """PKB-style public seeds (base + rank + trial stride), in the contract's per-scope form."""
    from pkb_env.contract import rank_seeds
    return rank_seeds(SEED_BASE + trial * TRIAL_STRIDE, spec.layout(world), rank, "pkb-way")


def to_saveable(out):
    """PKB's output saving: tensors to CPU; a tuple/list becomes {"output_i": ...}; a dict keeps its keys."""
    import torch

    def leaf(x):
        return x.detach().cpu() if isinstance(x, torch.Tensor) else x

    if isinstance(out, (tuple, list)):
        return {f"output_{i}": leaf(v) for i, v in enumerate(out)}
    if isinstance(out, dict):
        return {k: leaf(v) for k, v in out.items()}
    return leaf(out)


def first_tensor(args: tuple):
    """PKB times run_fn(t) with t the first tensor argument, or the first tensor inside the first list/tuple
    argument. Returns (t, rebuild) where rebuild(t2) gives the argument tuple with t replaced by t2."""
    import torch

    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            return a, (lambda t, i=i: (*args[:i], t, *args[i + 1:]))
        if isinstance(a, (list, tuple)):
            for j, b in enumerate(a):
                if isinstance(b, torch.Tensor):
                    def rebuild(t, i=i, j=j, a=a):
                        inner = type(a)((*a[:j], t, *a[j + 1:]))
                        return (*args[:i], inner, *args[i + 1:])
                    return b, rebuild
    raise SystemExit("worker.py: the inputs have no tensor argument to time")


def l2_bytes(device, mode: str) -> tuple[int, int]:
    """(bytes used for the groups, the device's real L2 bytes)."""
    import torch

    props = torch.cuda.get_device_properties(device)
    real = int(getattr(props, "L2_cache_size", 0) or 0)
    if mode == "real" and real > 0:
        return real, real
    try:
        pkb = int(getattr(props, "l2_cache_size"))  # what PKB reads; torch spells it L2_cache_size
    except Exception:
        pkb = PKB_DEFAULT_L2_BYTES
    return (pkb if pkb > 0 else PKB_DEFAULT_L2_BYTES), real


def num_input_groups(input_bytes: int, l2: int) -> int:
    if input_bytes <= 0 or input_bytes >= 3 * l2:
        return 1
    return int(min(max(2, 3 * l2 // input_bytes + 1), PKB_MAX_INPUT_GROUPS))


def measure(solution, args: tuple, device, warmup: int, iters: int, l2_mode: str) -> dict:
    """PKB's perf loop: clones of the first tensor argument, warm-up, then iters+1 CUDA events."""
    import torch

    t, rebuild = first_tensor(args)
    l2, real_l2 = l2_bytes(device, l2_mode)
    nbytes = t.element_size() * t.numel()
    groups_n = num_input_groups(nbytes, l2)
    groups = [rebuild(t.clone()) for _ in range(groups_n)]

    torch.cuda.synchronize()
    for i in range(warmup):
        solution(*groups[i % groups_n])
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    for i in range(iters):
        solution(*groups[i % groups_n])
        events[i + 1].record()
    torch.cuda.synchronize()
    per_iter = [float(events[i].elapsed_time(events[i + 1])) for i in range(iters)]
    total = float(events[0].elapsed_time(events[iters]))
    mean = total / iters
    std = (sum((x - mean) ** 2 for x in per_iter) / (iters - 1)) ** 0.5 if iters > 1 else 0.0
    return {"wall_time_ms": mean, "wall_time_total_ms": total, "wall_time_std_ms": std,
            "min_time_ms": min(per_iter), "max_time_ms": max(per_iter), "iterations": iters,
            "warmup_iterations": warmup, "num_input_groups": groups_n, "l2_cache_size_bytes": l2,
            "device_l2_cache_size_bytes": real_l2, "timed_tensor_bytes": nbytes}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, local_rank, world = torchrun_env(args.world_size)
    stamps = {"process_start": _T_PROCESS}
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    os.environ["TORCH_EXTENSIONS_DIR"] = extensions_dir(args.extensions_base, rank)
    os.makedirs(os.environ["TORCH_EXTENSIONS_DIR"], exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    import torch
    import torch.distributed as dist
    from pkb_env.task import load_task

    stamps["torch_imported"] = time.time()
    spec = load_task(args.task)
    preset = spec.preset(args.preset)
    dtype = args.dtype or preset.dtype
    solution = import_solution(args.solution)
    stamps["solution_imported"] = time.time()

    device = torch.device(f"cuda:{local_rank}")
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world, device_id=device)
    stamps["pg_ready"] = time.time()

    seeds = trial_seeds(spec, rank, world, args.trial)
    ctx = spec.input_context(rank, world, args.preset, dtype, f"cuda:{rank}", seeds)
    inputs = spec.make_inputs(ctx)
    torch.cuda.synchronize()
    stamps["inputs_ready"] = time.time()

    out = solution(*inputs)
    torch.cuda.synchronize()
    dist.barrier()
    stamps["called"] = time.time()
    torch.save(to_saveable(out), os.path.join(args.out, f"rank_{rank}.pt"))
    stamps["saved"] = time.time()

    if args.measure_perf:
        perf = measure(solution, inputs, device, args.warmup, args.iters, args.l2)
        perf.update(rank=rank, world_size=world, trial=args.trial, solution=os.path.abspath(args.solution))
        with open(os.path.join(args.out, f"perf_rank_{rank}.json"), "w") as f:
            json.dump(perf, f, indent=1)
        stamps["perf_done"] = time.time()

    dist.destroy_process_group()
    stamps["finished"] = time.time()
    with open(os.path.join(args.out, f"phases_rank_{rank}.json"), "w") as f:
        json.dump({"rank": rank, "stamps": stamps, "extensions_dir": os.environ["TORCH_EXTENSIONS_DIR"],
                   "device": torch.cuda.get_device_name(device), "torch": torch.__version__}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
