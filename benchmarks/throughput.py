"""Judged steps per second on a fixed mixed batch, judged back to back on one JudgeService (issue 23, item 3), or
through a client's verdicts-only lanes with its correct candidates timed alone (--lanes N; pkb_env/lanes.py).

    python benchmarks/throughput.py --executor cpu --world-size 2                      # CPU ranks over gloo
    python benchmarks/throughput.py --executor cpu --world-size 2 --lanes 2            # the same batch on 2 lanes
    python benchmarks/throughput.py --executor cuda --world-size 1 --preset bench --json throughput.json

What an RL loop feeds the judge is not one candidate again and again but a mix: correct NCCL code, kernels
that move data through symmetric memory, wrong answers, crashes and code that does not build. The batch is
fixed (the same list in the same order every run, so two runs compare): for each task of --tasks, in turn,
the reference itself (NCCL on GPUs, gloo on CPU ranks), the expert of solutions/experts/ where the executor
runs CUDA (symmetric memory: copy engine or SM loads and stores between peers) or else an alternative written
with other torch.distributed calls, a wrong answer (every output scaled by 1.5), one that crashes its ranks
(os._exit) and one that raises while it is imported. --rounds repeats the list.

Before the clock starts the service is opened on the first task (the rank processes pre-started, the
calibration measured or read) and every task's reference is timed once (what a long training run has
done after its first minutes); what is reported is then the batch alone:

* judged steps per second, and per GPU (the GPUs the judge's ranks occupy: W for `cuda`, the distinct
  devices for `cuda-emulated`; "-" for CPU ranks);
* step latency p50 / p95 overall and per kind of candidate, with the verdicts each kind got;
* where the time went: the step's stages (the candidate's, from the record) and the judge's operations
  (requests to the ranks, from the service's trace, pkb_env/tracing.py), each as seconds per step and a
  share of the batch's wall time.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pkb_env import JudgeConfig, JudgeService, LocalClient
from pkb_env.tables import table
from pkb_env.task import load_task

EXPERTS = Path(__file__).resolve().parents[1] / "solutions" / "experts"
TASKS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
ALTERNATIVES = {
    # the same result with other torch.distributed calls than the reference's (the primitives' own shapes)
    "all_reduce": resources.files("pkb_env.solutions").joinpath("examples/all_reduce_ring.py"),
    "all_gather": resources.files("pkb_env.solutions").joinpath("examples/all_gather_broadcasts.py"),
}


def kinds(task: str, cuda: bool) -> list[tuple[str, str]]:
    """The candidates judged for `task`, as (kind, source)."""
    names = load_task(task).parameters   # the reference's signature (load_task checks they agree)
    params, first = ", ".join(names), names[0]
    reference = load_task(task).reference_source
    fast = [("expert", (EXPERTS / f"{task}.py").read_text())] if cuda and (EXPERTS / f"{task}.py").exists() else []
    other = [("alternative", ALTERNATIVES[task].read_text())] if not fast and task in ALTERNATIVES else []
    return [("reference", reference), *fast, *other,
            ("wrong", f"def solution({params}):\n    return {first} * 1.5\n"),
            ("crashes", f"import os\n\n\ndef solution({params}):\n    os._exit(3)\n"),
            ("build error", f"raise ImportError('no module named fastcomm')\n\n\ndef solution({params}):\n"
                            f"    return {first}\n")]


def make_batch(tasks: list[str], cuda: bool, rounds: int) -> list[tuple[str, str, str]]:
    """(task, kind, source) in a fixed order: task by task, each task's kinds in turn, `rounds` times."""
    return [(task, kind, code) for _ in range(rounds) for task in tasks for kind, code in kinds(task, cuda)]


def gpus_used(config: JudgeConfig) -> int:
    """GPUs the judge's ranks occupy (0 for CPU ranks)."""
    if config.executor == "cuda":
        return config.world_size
    if config.executor == "cuda-emulated":
        import torch

        return min(config.world_size, torch.cuda.device_count())
    return 0


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run(args) -> dict:
    os.environ.setdefault("PKB_ENV_CACHE", tempfile.mkdtemp(prefix="pkb-bench-cache-"))
    config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset)
    operations: dict[str, float] = collections.defaultdict(float)
    timing = {"on": False}

    def trace(name: str, seconds: float) -> None:
        if timing["on"]:
            operations[name] += seconds

    def step(task: str, kind: str, record) -> dict:
        return {"task": task, "kind": kind, "verdict": record.verdict.value, "wall_s": record.wall_s,
                "stages": dict(record.stage_seconds), "speedup": record.speedup,
                "reference": vars(record.reference) if record.reference else {}}

    if args.lanes:   # the batch through a client's verdicts-only lanes, its correct candidates timed alone
        with LocalClient(config.replace(verify_lanes=args.lanes), trace=trace) as client:
            cuda = client.info.name != "cpu"
            tasks = [t for t in args.tasks if t in client.tasks()]
            batch = make_batch(tasks, cuda, args.rounds)
            start = time.perf_counter()
            for task in tasks:
                client.run(lambda service, task=task: service.reference_timing(task))
            client.map([(task, code) for task, kind, code in batch if kind == "wrong"][:args.lanes])  # lanes up
            ready_s = time.perf_counter() - start
            timing["on"] = True
            start = time.perf_counter()
            records = client.map([(task, code) for task, _, code in batch])
            wall = time.perf_counter() - start
        steps = [step(task, kind, record) for (task, kind, _), record in zip(batch, records)]
    else:
        with JudgeService(config, trace=trace) as judge:
            cuda = judge.info.name != "cpu"
            tasks = [t for t in args.tasks if t in judge.tasks()]
            batch = make_batch(tasks, cuda, args.rounds)
            start = time.perf_counter()
            for task in tasks:               # the ranks started, the calibration known, each reference timed once
                judge.reference_timing(task)
            ready_s = time.perf_counter() - start
            timing["on"] = True
            steps = []
            start = time.perf_counter()
            for task, kind, code in tqdm(batch, desc="batch", unit="step", disable=None, file=sys.stderr):
                steps.append(step(task, kind, judge.judge(task, code)))
            wall = time.perf_counter() - start
    gpus = gpus_used(config)
    return {"executor": args.executor, "world_size": args.world_size, "preset": args.preset, "tasks": tasks,
            "lanes": args.lanes,
            "gpus": gpus, "ready_s": ready_s, "wall_s": wall, "steps": steps, "operations": dict(operations),
            "steps_per_s": len(steps) / wall, "steps_per_s_per_gpu": len(steps) / wall / gpus if gpus else None}


def report(result: dict) -> str:
    steps, wall = result["steps"], result["wall_s"]
    lat = [s["wall_s"] for s in steps]
    per_gpu = result["steps_per_s_per_gpu"]
    lines = [f"{len(steps)} steps over {', '.join(result['tasks'])}: {result['executor']} at world size "
             f"{result['world_size']}, {result['preset']}"
             + (f", {result['lanes']} verdicts-only lanes" if result.get("lanes") else "")
             + f"; ready in {result['ready_s']:.1f} s (ranks started, "
             f"each reference timed), then the batch in {wall:.1f} s",
             f"judged steps per second {result['steps_per_s']:.2f}"
             + (f", per GPU {per_gpu:.2f} ({result['gpus']} GPU(s))" if per_gpu is not None else " (CPU ranks)")
             + f"; step latency p50 {percentile(lat, 50) * 1e3:.0f} ms, p95 {percentile(lat, 95) * 1e3:.0f} ms", ""]
    by_kind: dict[str, list[dict]] = collections.defaultdict(list)
    for s in steps:
        by_kind[s["kind"]].append(s)
    rows = []
    for kind, group in by_kind.items():
        walls = [s["wall_s"] for s in group]
        speedups = [s["speedup"] for s in group if s["speedup"]]
        verdicts = collections.Counter(s["verdict"] for s in group)
        rows.append([kind, len(group), f"{percentile(walls, 50) * 1e3:.0f}", f"{percentile(walls, 95) * 1e3:.0f}",
                     f"{sum(walls) / wall:.0%}", ", ".join(f"{v} {n}" for v, n in verdicts.items()),
                     f"{min(speedups):.2f}-{max(speedups):.2f}x" if speedups else "-"])
    lines.append(table(["kind", "steps", "p50 ms", "p95 ms", "share of wall", "verdicts", "speedups"], rows))
    stages: dict[str, float] = collections.defaultdict(float)
    for s in steps:
        for name, seconds in s["stages"].items():
            stages[name] += seconds
        for part in ("trials_s", "timing_s", "replay_s"):
            stages[f"reference {part[:-2]}"] += s["reference"].get(part, 0.0)
    n = len(steps)
    lines += ["", table(["stage (the record's)", "ms per step", "share of wall"],
                        [[k, f"{v / n * 1e3:.1f}", f"{v / wall:.0%}"]
                         for k, v in sorted(stages.items(), key=lambda kv: -kv[1])])]
    ops = result["operations"]
    lines += ["", table(["operation (the trace's)", "ms per step", "share of wall"],
                        [[k, f"{v / n * 1e3:.1f}", f"{v / wall:.0%}"] for k, v in sorted(ops.items(), key=lambda kv: -kv[1])])]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cpu", help="cpu, cuda or cuda-emulated")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--rounds", type=int, default=1, help="times the batch's list is judged")
    parser.add_argument("--lanes", type=int, default=0,
                        help="judge the batch through a LocalClient with this many verdicts-only lanes "
                             "(JudgeConfig.verify_lanes: pkb_env/lanes.py); 0: one step after another")
    parser.add_argument("--json", default=None, help="write the steps and the summary here")
    args = parser.parse_args()
    result = run(args)
    print(report(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
