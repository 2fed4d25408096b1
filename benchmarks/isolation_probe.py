"""Print what isolation candidate ranks get on this machine, and check a candidate still runs under it.

    python benchmarks/isolation_probe.py [--executor cuda --world-size 1]

Exit code 0 when the reference is judged correct under the isolation in force, 1 otherwise.
"""
import argparse
import sys

from pkb_env import JudgeConfig, JudgeService
from pkb_env.hardware import detect

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--executor", default="auto")
parser.add_argument("--world-size", type=int, default=1)
args = parser.parse_args()
print(detect().describe())
with JudgeService(JudgeConfig(executor=args.executor, world_size=args.world_size, preset="bench")) as judge:
    session = judge.open("all_reduce")
    print("executor:", judge.info.name, "| isolation:", judge.isolation())
    record = session.judge(session.reference)
    print("reference verdict:", record.verdict.value, "| speedup:", record.speedup, "| feedback:", record.feedback[:300])
sys.exit(0 if record.correct else 1)
