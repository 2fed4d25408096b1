"""Print what isolation candidate ranks get on this machine, and check a candidate still runs under it.

    python benchmarks/isolation_probe.py [--executor cuda --world-size 1]

Exit code 0 when the reference is judged correct under the isolation in force, 1 otherwise.
"""
import argparse
import sys

import gymnasium

import pkb_env  # noqa: F401
from pkb_env.hardware import detect

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--executor", default="auto")
parser.add_argument("--world-size", type=int, default=1)
args = parser.parse_args()
print(detect().describe())
env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=args.world_size,
                     executor=args.executor, preset="bench")
try:
    obs, info = env.reset(seed=0)
    print("executor:", info["executor"], "| isolation:", env.unwrapped.executor.isolation())
    _, reward, _, _, info = env.step(obs["reference"])
    print("reference verdict:", info["verdict"], "| speedup:", info["speedup"], "| feedback:", info["feedback"][:300])
finally:
    env.close()
sys.exit(0 if info["correct"] else 1)
