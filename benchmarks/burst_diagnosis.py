"""Why a gated burst can read slower than the same calls back to back: one variable at a time.

    python benchmarks/burst_diagnosis.py --out $OUT
    python benchmarks/burst_diagnosis.py --world-size 1 --out $OUT   # one GPU: host-bound calls

A prototype measured NCCL clone + all_reduce (bf16, 2 MiB, two H200s) at 46-67 us per call back to back
but 87-94 us in gated bursts with an event after every call. This times the same calls on every GPU
here, changing one thing at a time (us per call, the slowest rank, median of --reps):

  b2b               events around N calls only (nccl-tests' way)
  b2b+events        an event recorded after every call (events made before the loop)
  b2b+new-events    the same, each event made inside the loop (as the prototype did)
  gate              the judge's device gate (pkb_env.ranks.cuda_gate) released by one host store, then N
                    calls; every host polls the page and starts queueing at the release
  gate+events       the same with an event after every call
  gate+16-marks     the same with 16 events per burst (what the judge records)
  host-ahead        50 calls queued behind the closed gate, then released: device time only
  pinned b2b, pinned gate+events: the same with each rank's process bound to its own cores

and the host's time to issue one call (`launch`), the slowest rank's. Writes `diagnosis.json`.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

SIZES = (2 << 20, 16 << 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", ".out"))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--world-size", type=int, default=None, help="ranks, one per GPU (default: every GPU)")
    args = parser.parse_args()
    gpus = torch.cuda.device_count()
    world = args.world_size or gpus
    if not 1 <= world <= gpus:
        parser.error(f"--world-size {world}: this machine has {gpus} GPU(s); one rank per GPU")
    import torch.multiprocessing as mp

    page = Path(f"/dev/shm/pkb-diagnosis-{os.getpid()}")  # shared memory, as the judge's memfd page is
    page.write_bytes(b"\0" * 4096)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(_rank, args=(world, tmp, str(page), args.calls, args.reps), nprocs=world,
                               start_method="spawn")
            rows = json.loads(Path(tmp, "rows.json").read_text())
    finally:
        page.unlink()
    lines = [f"{world} x {torch.cuda.get_device_name(0)}, clone + NCCL all_reduce bf16, {args.calls} calls per "
             f"burst, median of {args.reps}; us per call / host us to issue a call (slowest rank)", "",
             "| variant | " + " | ".join(f"{s >> 20} MiB" for s in SIZES) + " |", "|---|" + "---|" * len(SIZES)]
    for variant in rows[str(SIZES[0])]:
        cells = [f"{rows[str(s)][variant]['per_call_us']:.1f} / {rows[str(s)][variant]['launch_us']:.1f}" for s in SIZES]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "diagnosis.json").write_text(json.dumps({"table": text, "rows": rows}, indent=1))
    return 0


def _rank(rank: int, world: int, tmp: str, page: str, calls: int, reps: int) -> None:
    os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
    import numpy as np
    import torch.distributed as dist

    from pkb_env.ranks.cuda_gate import DeviceGate
    from pkb_env.wire.gate import PageView

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", store=dist.FileStore(os.path.join(tmp, "store"), world), rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    host = dist.new_group(backend="gloo")
    view = PageView(os.open(page, os.O_RDONLY))
    writer = None
    if rank == 0:
        fd = os.open(page, os.O_RDWR)
        writer = np.frombuffer(mmap.mmap(fd, 4096), dtype=np.uint32)
        os.close(fd)
    gate = DeviceGate(view.address)
    stream = torch.cuda.current_stream()
    epoch = [0]

    def call(x):
        y = x.clone()
        dist.all_reduce(y)
        return y

    def b2b(sets, events: str):
        pool = [torch.cuda.Event(enable_timing=True) for _ in range(calls)] if events == "made" else []
        for e in pool:
            e.record()  # CUDA makes an event at its first record: here, not in the loop
        dist.barrier(group=host)
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        t0 = time.perf_counter()
        for i in range(calls):
            call(sets[i % len(sets)])
            if events == "made":
                pool[i].record()
            elif events == "new":
                torch.cuda.Event(enable_timing=True).record()
        launch = time.perf_counter() - t0
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3 / calls, launch / calls

    def gated(sets, marks: int, ahead: bool = False):
        count = min(calls, 50) if ahead else calls  # a queue behind a closed gate must not fill NCCL's work FIFO
        epoch[0] += 1
        pool = [torch.cuda.Event(enable_timing=True) for _ in range(marks)]
        for e in pool:
            e.record()
        every = max(1, calls // max(1, marks)) if marks else calls + 1
        torch.cuda.synchronize()
        gate.launch(epoch[0], stream.cuda_stream)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        if ahead:
            t0 = time.perf_counter()
            for i in range(count):
                call(sets[i % len(sets)])
            launch = time.perf_counter() - t0
            end.record()
        dist.barrier(group=host)  # every rank has queued its gate (and, ahead, its calls)
        if rank == 0:
            writer[0] = epoch[0]
        while view.epoch() < epoch[0]:
            pass
        if not ahead:
            t0 = time.perf_counter()
            used = 0
            for i in range(calls):
                call(sets[i % len(sets)])
                if (i + 1) % every == 0 and used < marks:
                    pool[used].record()
                    used += 1
            launch = time.perf_counter() - t0
            end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3 / count, launch / count

    variants = {
        "b2b": lambda s: b2b(s, "none"),
        "b2b+events": lambda s: b2b(s, "made"),
        "b2b+new-events": lambda s: b2b(s, "new"),
        "gate": lambda s: gated(s, 0),
        "gate+events": lambda s: gated(s, calls),
        "gate+16-marks": lambda s: gated(s, 16),
        "host-ahead": lambda s: gated(s, 0, ahead=True),
    }
    rows = {}
    everywhere = os.sched_getaffinity(0)
    for size in SIZES:
        sets = [torch.randn(size // 2, device="cuda").to(torch.bfloat16) for _ in range(max(8, (180 << 20) // size))]
        for _ in range(30):
            call(sets[0])
        row = {}
        for pinned in (False, True):
            os.sched_setaffinity(0, everywhere)
            if pinned:
                cores = sorted(everywhere)
                share = max(1, len(cores) // world)
                os.sched_setaffinity(0, cores[rank * share:(rank + 1) * share])
            for name, run in variants.items():
                if pinned and name not in ("b2b", "gate+events", "gate+16-marks"):
                    continue
                run(sets)
                got = [run(sets) for _ in range(reps)]
                per = torch.tensor([statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)],
                                   dtype=torch.float64)
                dist.all_reduce(per, op=dist.ReduceOp.MAX, group=host)
                row[("pinned " if pinned else "") + name] = {"per_call_us": float(per[0]) * 1e6,
                                                            "launch_us": float(per[1]) * 1e6}
        rows[str(size)] = row
        del sets
        torch.cuda.empty_cache()
    if rank == 0:
        Path(tmp, "rows.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
