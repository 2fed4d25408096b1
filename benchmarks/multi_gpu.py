"""Multi-GPU validation: every task's reference and expert on every GPU, per size; the calibration beside a
direct NCCL measurement; repeatability of the times a policy is rewarded on.

    python benchmarks/multi_gpu.py --presets bench large --steps 3 --markdown docs/measurements/DATE-multi-gpu-h200.md

For each preset and task (tasks without that preset are skipped): one step of the reference (unless
`--skip-reference-step`), then `--steps` steps of the expert (solutions/experts/<task>.py), each in a fresh
candidate rank set as in training. Reported per row: the reference's time per call, the expert's median over steps and its
max/min (repeatability), the speedup, the expert's bus bandwidth (nccl-tests' definition), its fraction of
the calibrated roofline and of the datasheet roofline, the dominant term of the bound, and the reference's
own fraction of the calibrated roofline (the cost model's sanity: both must stay at or below 1).

The calibration (`judge.calibrate()`: NCCL all_reduce through the judge's own timing loop) is compared with
a measurement that shares no code with the judge: `--world-size` processes started by torch.multiprocessing,
NCCL all_reduce of 256 MiB timed with CUDA events, busbw = 2 (n - 1) / n * bytes / time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

from pkb_env import JudgeConfig, JudgeService
from pkb_env.tables import table
from pkb_env.task import load_task

EXPERTS = Path(__file__).resolve().parents[1] / "solutions" / "experts"
DIRECT_BYTES = 256 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=torch.cuda.device_count())
    parser.add_argument("--presets", nargs="+", default=["bench", "large"])
    parser.add_argument("--tasks", nargs="+", default=sorted(p.stem for p in EXPERTS.glob("*.py")),
                        help="default: the tasks with an expert in solutions/experts")
    parser.add_argument("--steps", type=int, default=3, help="expert steps per task and preset")
    parser.add_argument("--skip-reference-step", action="store_true",
                        help="no step of the reference itself (the expert's step still times the reference and "
                             "checks against its outputs; saves a rank set per task and preset)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args()
    if args.world_size < 2:
        parser.error(f"needs at least 2 GPUs, found {torch.cuda.device_count()}")
    os.environ.setdefault("PKB_ENV_CACHE", tempfile.mkdtemp(prefix="pkb-multi-gpu-"))

    direct = direct_nccl_busbw(args.world_size)
    rows, calibration, isolation = [], None, None
    for preset in args.presets:
        with JudgeService(JudgeConfig(executor="cuda", world_size=args.world_size, preset=preset)) as judge:
            isolation = judge.isolation()
            for task in tqdm([t for t in args.tasks if preset in load_task(t).presets],
                             desc=f"{preset} x{args.world_size}", unit="task"):
                rows.append(measure(judge.open(task), task, preset, args.steps, not args.skip_reference_step))
            calibration = judge.calibration()

    headers = ["task", "preset", "ref us", "expert us", "max/min", "speedup", "busbw GB/s", "roofline",
               "datasheet roofline", "bound", "ref roofline"]
    body = [[r["task"], r["preset"], r["reference_us"], r["expert_us"], r["max_over_min"], r["speedup"],
             r["busbw_gbps"], r["roofline"], r["spec_fraction"], r["dominant"], r["reference_roofline"]]
            for r in rows]
    summary = (f"world size {args.world_size} on {torch.cuda.get_device_name(0)}; calibration: NCCL bus bandwidth "
               f"{calibration.bandwidth_gbps:.1f} GB/s, latency {calibration.alpha_s * 1e6:.1f} us; direct NCCL "
               f"all_reduce of {DIRECT_BYTES >> 20} MiB outside the judge: {direct:.1f} GB/s busbw")
    print("\n" + summary + "\n")
    print(table(headers, body))
    print("\nisolation:", isolation)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "calibration": vars(calibration), "direct_busbw_gbps": direct,
                       "isolation": isolation, "rows": rows}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(summary, headers, body, " ".join(sys.argv)))
    return 0


def measure(session, task: str, preset: str, steps: int, reference_step: bool = True) -> dict:
    if reference_step:
        record = session.judge(session.reference)
        assert record.correct, f"{task} reference: {record.feedback}"
    expert = (EXPERTS / f"{task}.py").read_text()
    times, records = [], []
    for _ in range(steps):
        record = session.judge(expert)
        assert record.correct, f"{task} expert: {record.feedback}"
        times.append(record.timing.time_s)
        records.append(record)
    middle = records[sorted(range(steps), key=lambda i: times[i])[steps // 2]]
    roofline = middle.roofline
    return {"task": task, "preset": preset, "reference_us": middle.timing.reference_s * 1e6,
            "expert_us": statistics.median(times) * 1e6, "max_over_min": max(times) / min(times),
            "expert_times_us": [t * 1e6 for t in times], "speedup": middle.timing.reference_s / statistics.median(times),
            "busbw_gbps": roofline.busbw_gbps, "roofline": roofline.fraction, "spec_fraction": roofline.spec_fraction,
            "dominant": roofline.bound.dominant, "bound_us": roofline.bound_s * 1e6,
            "reference_roofline": roofline.bound_s / middle.timing.reference_s,
            "suspect": [r.timing.suspect for r in records if r.timing.suspect]}


def direct_nccl_busbw(world_size: int) -> float:
    """NCCL all_reduce bus bandwidth measured without any of the judge's code."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_direct_rank, args=(world_size, tmp), nprocs=world_size, start_method="spawn")
        return json.loads(Path(tmp, "busbw.json").read_text())


def _direct_rank(rank: int, world_size: int, tmp: str) -> None:
    os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", store=dist.FileStore(os.path.join(tmp, "store"), world_size), rank=rank,
                            world_size=world_size, device_id=torch.device("cuda", rank))
    x = torch.ones(DIRECT_BYTES // 4, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        dist.barrier()
        start.record()
        dist.all_reduce(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    seconds = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if rank == 0:
        busbw = 2 * (world_size - 1) / world_size * DIRECT_BYTES / seconds.item() / 1e9
        Path(tmp, "busbw.json").write_text(json.dumps(busbw))
    dist.destroy_process_group()


def markdown(summary: str, headers: list[str], body: list[list], command: str) -> str:
    def cell(value):
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = [f"# Multi-GPU validation ({time.strftime('%Y-%m-%d')})", "", f"`{command}`", "", summary, "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
