"""Honest soak: many steps of correct candidates; none may be rejected by the clock, flagged, suspect or untimed.

    python benchmarks/honest_soak.py --executor cpu --world-size 2 --steps 200 --out $OUT
    python benchmarks/honest_soak.py --executor cpu --world-size 4 --steps 200 --out $OUT
    python benchmarks/honest_soak.py --executor cuda --presets bench large --experts --steps 32 --out $OUT

Steps cycle over the tasks that run at the world size and preset and, per task, over honest submissions:
the reference itself, an alternative written with other torch.distributed calls (below, for the eight
primitives), and with --experts the expert kernel of solutions/experts where there is one (GPUs). Every one must be judged correct, unflagged, not suspect, with a speedup. Reported:
the count of each failure, the smallest clock margin seen (how far the worst rank's least-delayed burst
stayed inside the allowance, docs/timing.md) and the smallest ratio of a claimed burst time to the judge's
own wall time, the reference-against-itself speedups, and per expert its roofline fraction. Writes
`soak_<executor>_ws<N>.json` under --out.
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

from pkb_env import JudgeConfig, JudgeService, solutions
from pkb_env.errors import JudgeError
from pkb_env.task import runnable_tasks

EXPERTS = Path(__file__).resolve().parents[1] / "solutions" / "experts"
ALTERNATIVES = {
    "all_reduce": solutions.read("examples", "all_reduce_ring"),
    "all_gather": """
import torch, torch.distributed as dist
def solution(tensor):
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.stack(parts)
""",
    "reduce_scatter": """
import torch, torch.distributed as dist
def solution(tensor):
    world, rank = dist.get_world_size(), dist.get_rank()
    total = tensor.clone()
    dist.all_reduce(total)
    rows = tensor.shape[0] // world
    return total[rank * rows:(rank + 1) * rows].clone()
""",
    "all_to_all": """
import torch, torch.distributed as dist
def solution(tensor):
    outs = [torch.empty_like(tensor[0]) for _ in range(tensor.shape[0])]
    dist.all_to_all(outs, [t.contiguous() for t in tensor.unbind(0)])
    return torch.stack(outs)
""",
    "broadcast": """
import torch, torch.distributed as dist
def solution(tensor, src):
    rank, world = dist.get_rank(), dist.get_world_size()
    out = tensor.clone()
    if rank == src:
        for peer in range(world):
            if peer != src:
                dist.send(out, peer)
    else:
        dist.recv(out, src)
    return out
""",
    "reduce": """
import torch, torch.distributed as dist
def solution(tensor, dst):
    out = tensor.clone()
    dist.all_reduce(out)
    return out if dist.get_rank() == dst else None
""",
    "gather": """
import torch, torch.distributed as dist
def solution(tensor, dst):
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.stack(parts) if dist.get_rank() == dst else None
""",
    "scatter": """
import torch, torch.distributed as dist
def solution(chunks, src):
    everything = chunks.clone()
    dist.broadcast(everything, src)
    return everything[dist.get_rank()].clone()
""",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--presets", nargs="+", default=["tiny"])
    parser.add_argument("--steps", type=int, default=200, help="per preset")
    parser.add_argument("--experts", action="store_true", help="also submit solutions/experts (GPUs)")
    parser.add_argument("--out", default=os.environ.get("OUT", ".out"))
    args = parser.parse_args()
    os.environ.setdefault("PKB_ENV_CACHE", tempfile.mkdtemp(prefix="pkb-soak-"))

    steps = []
    started = time.time()
    for preset in args.presets:
        plan = []
        for task in runnable_tasks(args.world_size, preset):
            plan.append((task, "reference"))
            if task in ALTERNATIVES:
                plan.append((task, "alternative"))
            if args.experts and (EXPERTS / f"{task}.py").exists():
                plan.append((task, "expert"))
        with JudgeService(JudgeConfig(executor=args.executor, world_size=args.world_size, preset=preset)) as service:
            for i in range(args.steps):
                task, kind = plan[i % len(plan)]
                session = service.open(task)
                code = {"reference": lambda: session.reference, "alternative": lambda: ALTERNATIVES[task],
                        "expert": lambda: (EXPERTS / f"{task}.py").read_text()}[kind]()
                steps.append(judge(session, preset, task, kind, code))
                write(args, steps, started)   # after every step: a run cut short still leaves its rows
                if i % 20 == 0:
                    print(f"{preset} step {i}: {time.time() - started:.0f} s", file=sys.stderr)
    summary, bad = write(args, steps, started)
    print(json.dumps({k: v for k, v in summary.items() if k != "experts"}, indent=1))
    for s in bad[:5]:
        print("REJECTED:", s["task"], s["kind"], s["verdict"], s["flags"], s["suspect"], s["feedback"])
    return 0 if not bad else 1


def judge(session, preset: str, task: str, kind: str, code: str) -> dict:
    """One step's row; the judge's own failure (its reference failed) is a row too, not the end of the run."""
    t0 = time.time()
    try:
        record = session.judge(code)
    except JudgeError as exc:
        return {"preset": preset, "task": task, "kind": kind, "verdict": "judge_error", "flags": [], "suspect": None,
                "speedup": None, "time_us": None, "margin_ms": None, "claim_ratio": None, "roofline": None,
                "step_s": time.time() - t0, "feedback": str(exc)[:600]}
    t = record.timing
    return {"preset": preset, "task": task, "kind": kind, "verdict": record.verdict.value,
            "flags": [f.code for f in record.exploit_flags], "suspect": t and t.suspect,
            "speedup": record.speedup, "time_us": t and t.time_s * 1e6,
            "margin_ms": t and t.clock_margin_s is not None and t.clock_margin_s * 1e3,
            "claim_ratio": t and t.claim_ratio, "roofline": record.roofline_fraction,
            "step_s": time.time() - t0, "feedback": record.feedback[:600] if not record.correct else None}


def write(args, steps: list[dict], started: float) -> tuple[dict, list[dict]]:
    """The summary of the rows so far, written with them to soak_<executor>_ws<N>.json; returns it and the
    rows that count against the judge."""
    bad = [s for s in steps if s["verdict"] != "correct" or s["flags"] or s["suspect"] or s["speedup"] is None]
    margins = [s["margin_ms"] for s in steps if s["margin_ms"] is not None]
    ratios = [s["claim_ratio"] for s in steps if s["claim_ratio"] is not None]
    selfs = [s["speedup"] for s in steps if s["kind"] == "reference" and s["speedup"]]
    summary = {"steps": len(steps), "rejected": len(bad), "flagged": sum(bool(s["flags"]) for s in steps),
               "suspect": sum(bool(s["suspect"]) for s in steps),
               "no_speedup": sum(s["speedup"] is None for s in steps),
               "smallest_margin_ms": min(margins) if margins else None,
               "smallest_claim_ratio": min(ratios) if ratios else None,
               "reference_self_speedup": {"min": min(selfs), "median": statistics.median(selfs), "max": max(selfs)}
               if selfs else None,
               "experts": {f"{s['task']}/{s['preset']}": {"speedup": s["speedup"], "roofline": s["roofline"],
                                                         "time_us": s["time_us"]}
                           for s in steps if s["kind"] == "expert"},
               "judge_errors": sum(s["verdict"] == "judge_error" for s in steps),
               "wall_s": time.time() - started}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"soak_{args.executor}_ws{args.world_size}.json").write_text(
        json.dumps({"args": vars(args), "summary": summary, "steps": steps}, indent=1))
    return summary, bad


if __name__ == "__main__":
    sys.exit(main())
