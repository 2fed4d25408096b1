"""Where torch's first symmetric allocation spends its seconds: the C++ stacks of a rank process sampled during it.

    python benchmarks/symmetric_setup_stack.py --samples 3

A child process (CUDA context and an NCCL group of one) calls symm_mem.empty for the first time; while it
runs, `cuda-gdb -p` (gdb is not installed on the device; cuda-gdb debugs host code as well) prints every
thread's backtrace, `--samples` times. Variants: `--backend CUDA` sets torch's symmetric-memory backend
first (where torch has set_backend); `--env K=V` adds variables to the child.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import sys, time, os
import torch, torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
torch.cuda.set_device(0); torch.zeros(1, device="cuda")
dist.init_process_group("nccl", store=dist.FileStore(sys.argv[1], 1), rank=0, world_size=1)
backend = sys.argv[2]
if backend != "default" and hasattr(symm_mem, "set_backend"):
    symm_mem.set_backend(backend)
print("READY", os.getpid(), flush=True)
t = time.perf_counter()
buf = symm_mem.empty(1 << 20, dtype=torch.uint8, device="cuda")
symm_mem.rendezvous(buf, dist.group.WORLD)
torch.cuda.synchronize()
print("FIRST", time.perf_counter() - t, flush=True)
dist.destroy_process_group()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds into the call before the first sample")
    parser.add_argument("--backend", default="default")
    parser.add_argument("--env", nargs="*", default=[])
    args = parser.parse_args()
    env = dict(os.environ, **dict(kv.split("=", 1) for kv in args.env))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, tempfile.mktemp(), args.backend], stdout=subprocess.PIPE,
                            text=True, env=env)
    line = proc.stdout.readline()
    print(line.strip())
    pid = int(line.split()[1])
    time.sleep(args.delay)
    gdb = "cuda-gdb" if subprocess.run(["which", "cuda-gdb"], capture_output=True).returncode == 0 else "gdb"
    for i in range(args.samples):
        if proc.poll() is not None:
            break
        done = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt 25"], capture_output=True,
                              text=True, timeout=120)
        frames = [l for l in done.stdout.splitlines() if l.startswith("#") or l.startswith("Thread")]
        print(f"--- sample {i} ---")
        print("\n".join(frames[:120]) or done.stderr[-2000:])
    print(proc.stdout.read().strip())
    proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
