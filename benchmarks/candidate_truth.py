"""An independent truth for a candidate's speedup: the candidate and the task's reference timed in plain
processes, their windows interleaved, in several fresh process sets; beside it, what the judge reads.

    python benchmarks/candidate_truth.py --candidate solutions/experts/all_reduce.py --processes 4 --out $OUT
    python benchmarks/candidate_truth.py --candidate benchmarks/pkb_way/candidate_load_inline.py --processes 2 \
        --judge-steps 8 --out $OUT
    python benchmarks/candidate_truth.py --noise --out $OUT     # how two windows of the same code differ

Part 1 times nothing the judge's way: each fresh process set (one process per GPU, NCCL, spawned here)
imports the task's reference.py and the candidate file as plain modules (a candidate that imports
`torch.utils.cpp_extension.load_inline` builds with torch's own; one that uses `pkb_env.runtime` compiles
in-process), makes `--sets` input sets of the preset with the task's own input maker (the only code of
pkb_env it runs, for the shapes and the draws), and times windows nccl-tests' way: a host barrier, a device
synchronisation, an event, N calls back to back on the rotating sets with every output held, an event; per
call = elapsed / N, the slowest rank. Reference and candidate windows alternate (ABBA); the process set's
speedup is the median over window pairs of reference / candidate. Across process sets the spread of that
speedup is the truth's own repeatability: what no judge can beat.

`--noise` times the reference against itself the same way for window lengths of 2, 8 and 32 ms, each pair's
halves back to back and again 60 ms apart: how far one pair's ratio spreads, and whether halves that are
closer, or longer, spread less (what the judge's pairs can reach at best).

Part 2 (`--judge-steps N`): N steps of the same candidate judged by pkb-env (executor cuda, the same world
size and preset), their paired speedups beside the truth. A candidate written for PKB (`from
torch.utils.cpp_extension import load_inline`) is submitted with that import replaced by pkb_env.runtime's
(the judge builds it once; the code is the same).

Writes candidate_truth.json and candidate_truth.md under --out.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NVLS_OFF)

ROOT = Path(__file__).resolve().parents[1]
TORCH_IMPORT = "from torch.utils.cpp_extension import load_inline"
ENV_IMPORT = "from pkb_env.runtime import load_inline"
WINDOW_S = 0.008          # the judge's GPU burst length
NOISE_WINDOWS_S = (0.002, 0.008, 0.032)
NOISE_GAP_S = 0.06        # about what separated a pair's halves before they were adjacent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="all_reduce")
    parser.add_argument("--candidate", type=Path, help="the candidate file (its `solution`)")
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--processes", type=int, default=4, help="fresh process sets")
    parser.add_argument("--pairs", type=int, default=40, help="window pairs per process set")
    parser.add_argument("--sets", type=int, default=256, help="input sets rotated through (the judge: one per call)")
    parser.add_argument("--pin", default=None, help="CPU sets for the process sets' ranks, '/' between sets: process "
                        "set p runs on set p mod their count (\"3\": all on core 3; \"0/4/8\": one core each)")
    parser.add_argument("--noise", action="store_true", help="the reference against itself: window length and gap")
    parser.add_argument("--judge-steps", type=int, default=0, help="steps of the candidate judged by pkb-env")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".out")))
    args = parser.parse_args()
    if not args.noise and args.candidate is None:
        parser.error("--candidate FILE (or --noise)")
    if args.world_size > torch.cuda.device_count():
        parser.error(f"--world-size {args.world_size}: this machine has {torch.cuda.device_count()} GPU(s)")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "gpu": torch.cuda.get_device_name(0)}
    lines = [f"`{' '.join(sys.argv)}` on {args.world_size} x {results['gpu']}", ""]
    if args.noise:
        results["noise"] = spawn(args, None, 0)
        lines += noise_table(results["noise"])
    if args.candidate is not None:
        runs = [spawn(args, args.candidate.resolve(), p) for p in range(args.processes)]
        results["truth"] = runs
        speedups = [r["speedup"] for r in runs]
        results["truth_summary"] = {"speedups": speedups, "max_over_min": max(speedups) / min(speedups)}
        lines += truth_table(runs)
        if args.judge_steps:
            results["judge"] = judge(args)
            lines += judge_lines(results["judge"], speedups)
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / "candidate_truth.md").write_text(text)
    (args.out / "candidate_truth.json").write_text(json.dumps(results, indent=1))
    return 0


# -- part 1: plain processes -----------------------------------------------------------------------------------

def spawn(args: argparse.Namespace, candidate: Path | None, index: int) -> dict:
    """One fresh process set: its result (rank 0's file)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        cpus = _cpus(args.pin, index)
        mp.start_processes(_rank, args=(args.world_size, tmp, args.task, args.preset, str(candidate or ""),
                                        args.pairs, args.sets, cpus), nprocs=args.world_size, start_method="spawn")
        result = json.loads(Path(tmp, "result.json").read_text())
        result["process_set"], result["wall_s"], result["cpus"] = index, time.monotonic() - started, cpus
        print(f"process set {index}: {json.dumps({k: v for k, v in result.items() if k != 'pairs'})[:400]}",
              flush=True)
        return result


def _cpus(pin: str | None, index: int) -> list[int] | None:
    """The CPUs of process set `index` under `--pin` ("0-3,8" style lists, '/' between sets); None: unpinned."""
    if not pin:
        return None
    chosen = pin.split("/")[index % len(pin.split("/"))]
    cpus: list[int] = []
    for part in chosen.split(","):
        low, _, high = part.partition("-")
        cpus += list(range(int(low), int(high or low) + 1))
    return cpus


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rank(rank: int, world: int, tmp: str, task_name: str, preset: str, candidate: str, pairs: int,
          sets: int, cpus: list[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)   # before the CUDA context: the driver's threads and memory follow it
    os.environ.update(NVLS_OFF)
    import torch.distributed as dist
    from pkb_env.contract import GroupCache
    from pkb_env.contract.inputs import rank_seeds
    from pkb_env.task import load_task

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", store=dist.FileStore(os.path.join(tmp, "store"), world), rank=rank,
                            world_size=world, device_id=device)
    host = dist.new_group(backend="gloo")
    task = load_task(task_name)
    dims = task.preset(preset).dims
    layout = task.layout(world, dims)
    groups = GroupCache().groups(layout, rank, task.group_dims)
    dtype = task.resolve_dtype(preset, None)

    def inputs(i: int) -> tuple:
        seeds = rank_seeds(1234, layout, rank, "truth", i)
        return task.make_inputs(task.input_context(rank, world, preset, dtype, device, seeds, device, groups))

    pool = [inputs(i) for i in range(sets)]
    reference = _module(task.reference_path, "truth_reference").solution
    if candidate:
        result = _interleaved(reference, _module(Path(candidate), "truth_candidate").solution, pool, pairs, host)
    else:
        result = _noise(reference, pool, pairs, host)
    if rank == 0:
        Path(tmp, "result.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _window(fn, pool: list[tuple], calls: int, start: int, host) -> float:
    """Seconds per call of `calls` calls back to back from set `start` on, every output held to the end."""
    import torch.distributed as dist

    dist.barrier(group=host)
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    held = []
    begin.record()
    for i in range(calls):
        held.append(fn(*pool[(start + i) % len(pool)]))
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / calls


def _slowest(values: list[float], host) -> list[float]:
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=host)
    return t.tolist()


def _calls_for(fn, pool, seconds: float, host) -> int:
    for _ in range(3):                      # warm-up: first launches, allocator growth
        _window(fn, pool, min(len(pool), 64), 0, host)
    probe = _window(fn, pool, 32, 0, host)
    return max(8, int(_slowest([seconds / max(probe, 1e-7)], host)[0]))


def _interleaved(reference, candidate, pool, pairs: int, host) -> dict:
    calls = _calls_for(reference, pool, WINDOW_S, host)
    _calls_for(candidate, pool, WINDOW_S, host)
    ref, cand = [], []
    for p in range(pairs):                   # ABBA: whatever favours the second half cancels
        order = (reference, candidate) if p % 2 == 0 else (candidate, reference)
        first = _window(order[0], pool, calls, p * calls, host)
        second = _window(order[1], pool, calls, p * calls, host)
        r, c = (first, second) if p % 2 == 0 else (second, first)
        ref.append(r)
        cand.append(c)
    ref, cand = _slowest(ref, host), _slowest(cand, host)
    ratios = [r / c for r, c in zip(ref, cand)]
    return {"calls": calls, "reference_us": statistics.median(ref) * 1e6, "candidate_us": statistics.median(cand) * 1e6,
            "speedup": statistics.median(ratios), "pair_spread": _spread(ratios), "pairs": ratios}


def _noise(reference, pool, pairs: int, host) -> dict:
    rows = []
    for window in NOISE_WINDOWS_S:
        calls = _calls_for(reference, pool, window, host)
        for gap in (0.0, NOISE_GAP_S):
            ratios = []
            for p in range(pairs):
                first = _window(reference, pool, calls, 0, host)
                if gap:
                    time.sleep(gap)
                second = _window(reference, pool, calls, 0, host)
                ratios.append(_slowest([first], host)[0] / _slowest([second], host)[0])
            rows.append({"window_ms": window * 1e3, "gap_ms": gap * 1e3, "calls": calls,
                         "spread": _spread(ratios), "median": statistics.median(ratios),
                         "median_of_5_range": _median_of(ratios, 5)})
    return {"rows": rows}


def _spread(ratios: list[float]) -> float:
    """(p90 - p10) / median, as the judge's record has it."""
    q = statistics.quantiles(ratios, n=10)
    return (q[-1] - q[0]) / statistics.median(ratios)


def _median_of(ratios: list[float], k: int) -> list[float]:
    """The range of medians of consecutive groups of k ratios (a judge step's k pairs)."""
    groups = [statistics.median(ratios[i:i + k]) for i in range(0, len(ratios) - k + 1, k)]
    return [min(groups), max(groups)]


def noise_table(noise: dict) -> list[str]:
    lines = ["The reference against itself (two windows; ratio = first / second):", "",
             "| window | gap | calls | spread (p90-p10)/median | median | medians of 5 pairs |", "|---|---|---|---|---|---|"]
    for r in noise["rows"]:
        lo, hi = r["median_of_5_range"]
        lines.append(f"| {r['window_ms']:.0f} ms | {r['gap_ms']:.0f} ms | {r['calls']} | {r['spread']:.3f} | "
                     f"{r['median']:.3f} | {lo:.3f}-{hi:.3f} |")
    return lines + [""]


def truth_table(runs: list[dict]) -> list[str]:
    lines = ["Truth: reference and candidate windows interleaved in plain processes (us per call, slowest rank):", "",
             "| process set | CPUs | calls/window | reference us | candidate us | speedup (median of pairs) | pair spread |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        cpus = "any" if not r["cpus"] else (str(r["cpus"][0]) if len(r["cpus"]) == 1 else f"{r['cpus'][0]}-{r['cpus'][-1]}")
        lines.append(f"| {r['process_set']} | {cpus} | {r['calls']} | {r['reference_us']:.1f} | {r['candidate_us']:.1f} | "
                     f"{r['speedup']:.3f} | {r['pair_spread']:.3f} |")
    speedups = [r["speedup"] for r in runs]
    cand = [r["candidate_us"] for r in runs]
    ref = [r["reference_us"] for r in runs]
    lines += ["", f"speedup {min(speedups):.3f}-{max(speedups):.3f} (max/min {max(speedups) / min(speedups):.3f}); "
                  f"candidate's own time max/min {max(cand) / min(cand):.3f}, the reference's {max(ref) / min(ref):.3f}",
              ""]
    return lines


# -- part 2: the judge -----------------------------------------------------------------------------------------

def judge(args: argparse.Namespace) -> dict:
    os.environ.setdefault("PKB_ENV_CACHE", tempfile.mkdtemp(prefix="pkb-truth-"))
    from pkb_env import JudgeConfig, JudgeService

    source = args.candidate.read_text().replace(TORCH_IMPORT, ENV_IMPORT)
    steps = []
    with JudgeService(JudgeConfig(executor="cuda", world_size=args.world_size, preset=args.preset)) as service:
        session = service.open(args.task)
        for _ in range(args.judge_steps):
            record = session.judge(source)
            t = record.timing
            steps.append({"verdict": record.verdict.value, "speedup": record.speedup,
                          "low": t and t.speedup_low, "high": t and t.speedup_high, "pairs": t and t.pairs,
                          "time_us": t and t.time_s * 1e6, "wall_s": record.wall_s})
            print(f"judge step: {steps[-1]}", flush=True)
    return {"steps": steps}


def judge_lines(result: dict, truth: list[float]) -> list[str]:
    got = [s["speedup"] for s in result["steps"] if s["speedup"] is not None]
    if not got:
        return ["The judge gave no speedup: " + json.dumps(result["steps"][:2]), ""]
    median, centre = statistics.median(got), statistics.median(truth)
    return [f"The judge (pkb-env, {len(got)} steps): paired speedup {min(got):.3f}-{max(got):.3f}, median {median:.3f}; "
            f"truth median {centre:.3f}; judge / truth {median / centre:.3f}", ""]


if __name__ == "__main__":
    sys.exit(main())
