"""Throughput of the Ray judge pool beside local judging, on one batch of mixed candidates (docs/scale_out.md).

    python benchmarks/pool_throughput.py --actors 1 2 --cpus-per-actor 1            # a local cluster, CPU judges
    python benchmarks/pool_throughput.py --nodes 2 --cpus-per-node 2 --actors 2      # two simulated nodes
    python benchmarks/pool_throughput.py --kill --hang-deadline 5 --actors 2 --cpus-per-actor 1
    python benchmarks/pool_throughput.py --executor cuda --world-size 1 --preset bench --batch 16 --actors 1

The batch cycles over all_reduce, all_gather, broadcast and reduce; per task: the reference twice, a wrong
answer twice (every output scaled by 1.5), one that hangs (past trial_timeout_s) and one that crashes
(os._exit) -- 24 steps at the default size; with `--experts`, the symmetric-memory experts of
solutions/experts/ replace one reference each (GPUs). The same batch is judged on one local JudgeService
first (`--no-local` skips it) and the pool's verdicts are compared with it, step by step.

`--nodes N` simulates N nodes on this machine (ray.cluster_utils.Cluster: a raylet per node, one GCS) with
`--cpus-per-node` logical CPUs (and `--gpus-per-node`). `--kill` SIGKILLs one busy actor mid-batch and
reports what became of its step; `--hang-deadline S` judges one hanging candidate with a batch deadline of
S seconds and reports how long map() took. Every pool's processes are listed before close and checked
gone after it.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import time

from pkb_env import JudgeConfig, JudgeService
from pkb_env.config import TimingProtocol
from pkb_env.tables import table
from pkb_env.task import load_task

TASKS = ("all_reduce", "all_gather", "broadcast", "reduce")
HERE = os.path.dirname(os.path.abspath(__file__))


def parameters(task: str) -> str:
    return ", ".join(load_task(task).parameters)   # the reference's signature (load_task checks they agree)


def candidates(task: str, experts: bool) -> list[tuple[str, str]]:
    params, first = parameters(task), parameters(task).split(",")[0]
    reference = load_task(task).reference_source
    expert = os.path.join(HERE, "..", "solutions", "experts", f"{task}.py")
    return [("reference", reference),
            ("expert", open(expert).read()) if experts else ("reference", reference),
            ("wrong", f"def solution({params}):\n    return {first} * 1.5\n"),
            ("wrong", f"def solution({params}):\n    return {first} * 1.5 + 1\n"),
            ("hangs", f"import time\n\ndef solution({params}):\n    time.sleep(600)\n    return {first}\n"),
            ("crashes", f"import os\n\ndef solution({params}):\n    os._exit(3)\n")]


def make_batch(size: int, experts: bool) -> list[tuple[str, str, str]]:
    pool = [(task, kind, code) for task in TASKS for kind, code in candidates(task, experts)]
    return [pool[i % len(pool)] for i in range(size)]


def judge_locally(config: JudgeConfig, batch) -> tuple[list, float]:
    with JudgeService(config) as judge:
        judge.prestart()
        judge.open(batch[0][0])   # the ranks and calibration ready, as the pool's actors are at start
        start = time.perf_counter()
        records = [judge.judge(task, code) for task, _, code in batch]
        return records, time.perf_counter() - start


def gone(pids: list[int], wait_s: float = 10.0) -> list[int]:
    import psutil

    end = time.monotonic() + wait_s
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.2)


def run_pool(config, batch, actors, args, local) -> dict:
    from pkb_env.pool import JudgePool

    t0 = time.perf_counter()
    pool = JudgePool(config, address="auto", actors=actors, cpus_per_actor=args.cpus_per_actor)
    started = time.perf_counter() - t0
    result = {"actors": actors, "start_s": started, "nodes": len({a["node"] for a in pool.started})}
    try:
        start = time.perf_counter()
        futures = [pool.submit(task, code) for task, _, code in batch]
        killed = None
        if args.kill:
            while not killed:
                busy = [a for a in pool.health() if a.get("busy")]
                if busy:
                    os.kill(busy[0]["pid"], signal.SIGKILL)
                    killed = busy[0]
                time.sleep(0.2)
        records = [r for r in pool.as_completed(futures, deadline_s=args.deadline)]
        wall = time.perf_counter() - start
        records = [f.result() for f in futures]
        result.update(wall_s=wall, steps_per_s=len(batch) / wall, stats=pool.stats(),
                      verdicts=collections.Counter(r.verdict.value for r in records))
        if local is not None:
            result["same_as_local"] = sum(a.verdict == b.verdict for a, b in zip(records, local))
        if killed:
            result["killed_pid"] = killed["pid"]
            result["killed_step"] = killed["busy"]
            result["after_kill"] = [r.verdict.value for r in records if r.verdict.value == "judge_error"] or "retried"
        if args.hang_deadline:
            task = batch[0][0]
            hang = candidates(task, False)[4][1]
            t = time.perf_counter()
            (record,) = pool.map([(task, hang)], deadline_s=args.hang_deadline)
            result["hang"] = {"deadline_s": args.hang_deadline, "returned_s": time.perf_counter() - t,
                              "verdict": record.verdict.value, "error": record.error}
        end = time.monotonic() + 60   # a killed actor restarts: list its new processes too
        while not all(a.get("alive") for a in pool.health(timeout_s=5)) and time.monotonic() < end:
            time.sleep(0.5)
        pids = [p for ps in pool.process_ids().values() for p in ps]
    finally:
        pool.close()
    result["processes_before_close"] = len(pids)
    result["left_after_close"] = gone(pids)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cpus-per-actor", type=float, default=None)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--cpus-per-node", type=int, default=None)
    parser.add_argument("--gpus-per-node", type=int, default=None)
    parser.add_argument("--experts", action="store_true", help="an expert kernel in place of one reference per task")
    parser.add_argument("--no-local", action="store_true")
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--hang-deadline", type=float, default=None)
    parser.add_argument("--deadline", type=float, default=900.0, help="the batch's deadline (s)")
    parser.add_argument("--trial-timeout", type=float, default=6.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import ray

    protocol = TimingProtocol.quick("host") if args.executor == "cpu" else None
    config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset, trials=2,
                         trial_timeout_s=args.trial_timeout, protocol=protocol)
    batch = make_batch(args.batch, args.experts)
    local, local_s = (None, None) if args.no_local else judge_locally(config, batch)
    cluster = None
    if args.nodes > 1:
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus_per_node,
                                                                 "num_gpus": args.gpus_per_node})
        for _ in range(args.nodes - 1):
            cluster.add_node(num_cpus=args.cpus_per_node, num_gpus=args.gpus_per_node)
        ray.init(address=cluster.address, log_to_driver=False)
    else:
        ray.init(num_cpus=args.cpus_per_node, num_gpus=args.gpus_per_node, include_dashboard=False,
                 log_to_driver=False)
    results = []
    try:
        for actors in args.actors:
            results.append(run_pool(config, batch, actors, args, local))
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    rows = []
    if local is not None:
        rows.append(["local JudgeService", 1, "-", f"{local_s:.1f}", f"{len(batch) / local_s:.2f}", "-", "-", "-"])
    for r in results:
        rows.append([f"pool, {r['nodes']} node(s)", r["actors"], f"{r['start_s']:.1f}", f"{r['wall_s']:.1f}",
                     f"{r['steps_per_s']:.2f}", f"{r.get('same_as_local', '-')}/{len(batch)}",
                     f"{r['stats']['retried']}/{r['stats']['unjudged']}",
                     f"{r['processes_before_close']} -> {len(r['left_after_close'])}"])
    print(f"\n{len(batch)} steps ({', '.join(f'{k} {v}' for k, v in collections.Counter(k for _, k, _ in batch).items())}),"
          f" {args.executor} at world size {args.world_size}, {args.preset}")
    print(table(["judge", "actors", "start s", "batch s", "steps/s", "same verdicts", "retried/unjudged",
                 "processes at close -> left"], rows))
    for r in results:
        if "killed_pid" in r:
            print(f"killed actor pid {r['killed_pid']} judging {r['killed_step']}: {r['after_kill']}; "
                  f"stats {r['stats']}")
        if "hang" in r:
            print(f"hang with deadline {r['hang']['deadline_s']:g} s: map returned in {r['hang']['returned_s']:.1f} s, "
                  f"{r['hang']['verdict']}: {r['hang']['error']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"local_s": local_s, "batch": len(batch), "results": results}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
