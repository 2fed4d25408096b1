"""Soak: many steps of mixed candidates on one env, watching for leaks in the judge and on the machine.

    python benchmarks/soak.py --steps 200 --world-size 4 --out docs/measurements/DATE-soak-cpu.png

Candidates cycle through: the reference, a ring all_reduce, a wrong answer, one that raises, one that
exits in one rank, one that deadlocks one rank, an infinite loop, one that prints megabytes, one that
allocates a lot and one that spawns children. After each step it samples the judge process's memory
(RSS) and open file descriptors, the number of processes the executor owns, every process on the
machine, and the bytes left in the executor's temporary directory. A flat line is the result we want.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import gymnasium
import psutil
from tqdm import tqdm

import pkb_env  # noqa: F401
from pkb_env import solutions
from pkb_env.config import JudgeConfig
from pkb_env.tables import table

CANDIDATES = {
    "reference": None,
    "ring": solutions.read("examples", "all_reduce_ring"),
    "wrong": "def solution(tensor):\n    return tensor.clone()\n",
    "raises": "def solution(tensor):\n    raise RuntimeError('soak')\n",
    "exit_one_rank": "import os, torch.distributed as dist\ndef solution(tensor):\n"
                     "    if dist.get_rank() == 1:\n        os._exit(9)\n    out = tensor.clone()\n"
                     "    dist.all_reduce(out)\n    return out\n",
    "deadlock": "import torch.distributed as dist\ndef solution(tensor):\n    out = tensor.clone()\n"
                "    if dist.get_rank() != 0:\n        dist.all_reduce(out)\n    return out\n",
    "spin": "def solution(tensor):\n    while True:\n        pass\n",
    "print_flood": "def solution(tensor):\n    for _ in range(100000):\n        print('x' * 1000)\n",
    "allocate": "import torch\n_keep = []\ndef solution(tensor):\n    _keep.append(torch.ones(64 << 20))\n"
                "    raise MemoryError('held 256 MB and gave up')\n",
    "children": "import subprocess\ndef solution(tensor):\n    for _ in range(4):\n"
                "        subprocess.Popen(['sleep', '300'])\n    raise RuntimeError('left children')\n",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--executor", default="cpu")
    parser.add_argument("--json", default=None, help="write the samples here")
    parser.add_argument("--out", default=None, help="write a PNG plot of the samples here")
    args = parser.parse_args()

    settings = JudgeConfig(trials=2, trial_timeout_s=4.0, build_timeout_s=20.0)  # world size, executor: below
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=args.world_size,
                         executor=args.executor, max_turns=args.steps + 1, config=settings)
    obs, _ = env.reset(seed=0)
    judge = env.unwrapped.client.run(lambda service: service)  # the env's JudgeService (its processes and files)
    me = psutil.Process()
    names = list(CANDIDATES)
    samples, verdicts = [], {}
    start = time.monotonic()
    try:
        for step in tqdm(range(args.steps), desc="soak", unit="step"):
            name = names[step % len(names)]
            t0 = time.monotonic()
            obs, reward, _, _, info = env.step(CANDIDATES[name] or obs["reference"])
            verdicts.setdefault(name, set()).add(info["verdict"])
            samples.append({"step": step, "candidate": name, "verdict": info["verdict"],
                            "seconds": time.monotonic() - t0, "judge_rss_mb": me.memory_info().rss / 2**20,
                            "judge_fds": me.num_fds(), "executor_processes": len(judge.process_ids()),
                            "machine_processes": len(psutil.pids()),
                            "tmp_bytes": judge.directory_bytes()})
    finally:
        env.close()
    leftovers = [p.info for p in psutil.process_iter(["pid", "cmdline"]) if p.info["cmdline"] == ["sleep", "300"]]

    def spread(key):
        first = [s[key] for s in samples[: len(names)]]
        last = [s[key] for s in samples[-len(names):]]
        return [key, min(first), max(first), min(last), max(last), max(s[key] for s in samples)]

    print(f"\n{args.steps} steps in {time.monotonic() - start:.0f} s on {args.executor}, world size {args.world_size}\n")
    print(table(["metric", "first cycle min", "first cycle max", "last cycle min", "last cycle max", "max"],
                [spread(k) for k in ("judge_rss_mb", "judge_fds", "executor_processes", "machine_processes",
                                     "tmp_bytes", "seconds")]))
    print("\n" + table(["candidate", "verdicts"], [[n, ", ".join(sorted(v))] for n, v in verdicts.items()]))
    print(f"\norphaned 'sleep 300' children after close: {len(leftovers)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "samples": samples, "leftovers": leftovers}, f)
    if args.out:
        plot(samples, args.out)
    return 0


def plot(samples: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["judge_rss_mb", "judge_fds", "executor_processes", "machine_processes", "tmp_bytes", "seconds"]
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2 * len(keys)), sharex=True)
    steps = [s["step"] for s in samples]
    for ax, key in zip(axes, keys):
        ax.plot(steps, [s[key] for s in samples], lw=1)
        ax.set_ylabel(key, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.suptitle("pkb-env soak: judge and machine resources per step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
