"""Where the first symmetric allocation's seconds go in a fresh rank process, and what a fork server can take off it.

    python benchmarks/symmetric_setup_cost.py --runs 3

Each variant runs in fresh processes (world size 1, NCCL group over a FileStore, one GPU):
  plain    torch imported, CUDA context, process group; then the first symm_mem.empty + rendezvous, and a second
  preload  the same, after loading NVSHMEM's host library (ctypes, RTLD_GLOBAL) before any CUDA call
  forked   a parent imports torch and preloads the library without touching CUDA, then forks the child that
           does `plain` (the zygote's situation: pkb_env/sandbox/zygote.py)
  imported the same, the parent also importing every module the first allocation imported in a `plain` run
           (the modules are listed: a first allocation imports them, compiled from source where no .pyc
           can be written, as in rank processes: PYTHONDONTWRITEBYTECODE)
Printed: seconds of each part, per run.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
import time


def nvshmem_libraries() -> list[str]:
    import importlib.util

    found = []
    for name in ("nvidia.nvshmem", "nvidia"):
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                found += glob.glob(os.path.join(root, "**", "libnvshmem_host.so*"), recursive=True)
        if found:
            break
    return sorted(set(found))


def preload() -> float:
    t = time.perf_counter()
    for path in nvshmem_libraries():
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return time.perf_counter() - t


def child(store_path: str, preloaded: float | None) -> dict:
    t0 = time.perf_counter()
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    out = {"import_s": time.perf_counter() - t0, "preload_s": preloaded}
    t = time.perf_counter()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    out["context_s"] = time.perf_counter() - t
    t = time.perf_counter()
    dist.init_process_group("nccl", store=dist.FileStore(store_path, 1), rank=0, world_size=1)
    out["group_s"] = time.perf_counter() - t
    for label in ("first", "second"):
        before = set(sys.modules)
        t = time.perf_counter()
        buf = symm_mem.empty(1 << 20, dtype=torch.uint8, device="cuda")
        if label == "first":
            out["imported"] = sorted(set(sys.modules) - before)
        torch.cuda.synchronize()
        out[f"{label}_empty_s"] = time.perf_counter() - t
        t = time.perf_counter()
        symm_mem.rendezvous(buf, dist.group.WORLD)
        torch.cuda.synchronize()
        out[f"{label}_rendezvous_s"] = time.perf_counter() - t
    out["libraries"] = nvshmem_libraries()
    out["backend"] = getattr(symm_mem, "get_backend", lambda *_: "?")(torch.device("cuda")) if hasattr(symm_mem, "get_backend") else "?"
    dist.destroy_process_group()
    return out


def run(variant: str, modules: list[str]) -> dict:
    store = tempfile.mktemp(prefix="symm-store-")
    code = f"import json, sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); " \
           f"import symmetric_setup_cost as m; print(json.dumps(m.entry({variant!r}, {store!r}, {modules!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if done.returncode:
        return {"variant": variant, "error": done.stderr[-1500:]}
    return {"variant": variant, **json.loads(done.stdout.strip().splitlines()[-1])}


def entry(variant: str, store: str, modules: list[str]) -> dict:
    if variant == "plain":
        return child(store, None)
    if variant == "preload":
        return child(store, preload())
    # forked: torch and the library in the parent, no CUDA; the child does the rest
    import importlib

    import torch  # noqa: F401

    loaded = preload()
    if variant == "imported":
        t = time.perf_counter()
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                pass
        loaded = time.perf_counter() - t
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        result = child(store, loaded)
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    first = run("plain", [])
    modules = first.get("imported", [])
    results = [first] + [run(v, modules) for i in range(args.runs) for v in ("plain", "forked", "imported")
                         if (i, v) != (0, "plain")]
    keys = ("import_s", "preload_s", "context_s", "group_s", "first_empty_s", "first_rendezvous_s", "second_empty_s",
            "second_rendezvous_s")
    print("variant  " + "  ".join(k.replace("_s", "") for k in keys))
    for r in results:
        if "error" in r:
            print(r["variant"], "ERROR", r["error"])
            continue
        print(f"{r['variant']:8} " + "  ".join("-" if r.get(k) is None else f"{r[k]:.3f}" for k in keys))
    print("libraries:", results[0].get("libraries"), "backend:", results[0].get("backend"))
    print(f"modules the first allocation imported ({len(modules)}):", " ".join(modules[:80]), "..." if len(modules) > 80 else "")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
