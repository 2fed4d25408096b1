"""Which torch.distributed operations a plain gloo group performs on CUDA tensors (why emulated ranks stage them
through host memory: pkb_env/ranks/host_staged.py, docs/multi_gpu.md "Point-to-point on emulated ranks").

    python benchmarks/gloo_cuda_ops.py            # needs one CUDA GPU; two ranks share cuda:0

Two ranks join a plain gloo group and run each operation the references use on cuda:0 tensors, checking the
result; point-to-point runs last, in processes of its own, because gloo aborts the process there. One line per
operation: ok, wrong (delivered other values), raised (the exception), or not reached (the process died first:
its exit status is printed).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

COLLECTIVES = ["all_reduce", "all_reduce_avg", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
               "reduce_scatter_tensor", "all_to_all_single", "gather", "scatter", "barrier"]
POINT_TO_POINT = ["isend_irecv"]


def rank_main(rank: int, store: str, names: list[str]) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    dev, other = "cuda:0", 1 - rank

    def full(v: float, n: int = 4) -> torch.Tensor:
        return torch.full((n,), v, device=dev)

    def run(name: str):  # -> (got, expected)
        if name == "all_reduce":
            x = full(rank + 1.0)
            dist.all_reduce(x)
            return x, full(3.0)
        if name == "all_reduce_avg":
            x = full(rank + 1.0)
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            return x, full(1.5)
        if name == "broadcast":
            x = full(rank + 1.0)
            dist.broadcast(x, 0)
            return x, full(1.0)
        if name == "reduce":
            x = full(rank + 1.0)
            dist.reduce(x, 0)
            return x, full(3.0) if rank == 0 else full(2.0)
        if name == "all_gather":
            parts = [full(0.0, 2) for _ in range(2)]
            dist.all_gather(parts, full(rank + 1.0, 2))
            return torch.cat(parts), torch.tensor([1.0, 1, 2, 2], device=dev)
        if name == "all_gather_into_tensor":
            out = full(0.0)
            dist.all_gather_into_tensor(out, full(rank + 1.0, 2))
            return out, torch.tensor([1.0, 1, 2, 2], device=dev)
        if name == "reduce_scatter_tensor":
            out = full(0.0, 2)
            dist.reduce_scatter_tensor(out, full(rank + 1.0))
            return out, full(3.0, 2)
        if name == "all_to_all_single":
            out = full(0.0)
            dist.all_to_all_single(out, torch.tensor([0.0, 0, 1, 1], device=dev) + 10 * rank)
            return out, torch.tensor([0.0, 0, 10, 10], device=dev) + rank
        if name == "gather":
            parts = [full(0.0, 2) for _ in range(2)] if rank == 0 else None
            dist.gather(full(rank + 1.0, 2), parts, dst=0)
            return (torch.cat(parts), torch.tensor([1.0, 1, 2, 2], device=dev)) if rank == 0 else (full(0.0), full(0.0))
        if name == "scatter":
            out = full(0.0, 2)
            dist.scatter(out, [full(1.0, 2), full(2.0, 2)] if rank == 0 else None, src=0)
            return out, full(rank + 1.0, 2)
        if name == "barrier":
            dist.barrier()
            return full(0.0), full(0.0)
        if name == "isend_irecv":
            got = full(0.0)
            works = [dist.isend(full(rank + 1.0), other), dist.irecv(got, other)]
            for work in works:
                work.wait()
            return got, full(other + 1.0)
        raise ValueError(name)

    for name in names:
        try:
            got, want = run(name)
            verdict = "ok" if torch.equal(got.cpu(), want.cpu()) else f"wrong: {got.cpu().tolist()}"
        except Exception as exc:  # noqa: BLE001 (the probe reports it)
            verdict = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        if rank == 0:
            print(f"{name}: {verdict}", flush=True)
    dist.destroy_process_group()


def probe(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), store, *names],
                                  stdout=subprocess.PIPE if r else None, stderr=subprocess.DEVNULL, text=True)
                 for r in range(2)]
        codes = [p.wait(timeout=300) for p in procs]
        if any(codes):
            print(f"  (ranks exited {codes}; operations without a line above were not reached)", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    else:
        import torch

        print(f"plain gloo on CUDA tensors, torch {torch.__version__}, 2 ranks on cuda:0", flush=True)
        probe(COLLECTIVES)
        probe(POINT_TO_POINT)
