"""What containing the compile service costs: a small kernel through NVRTC and nvcc, and a load_inline build.

    python benchmarks/compile_cost.py --repeats 5                 # CPU machine: a C++ extension
    python benchmarks/compile_cost.py --repeats 5 --cuda          # GPU machine: a CUDA extension too

For each compiler, three figures (seconds, every repeat with a fresh source so that nothing is cached):
  direct     the compiler called in this process: what the judge did before builds moved into cells
             (NVRTC in the judge's process, nvcc and the extension build in a plain child process)
  contained  the judge's compile service, cold: checks, a build cell (namespaces, allowlisted root,
             unprivileged uid, limits) started from the zygote, the build, the bytes back, the cache written
  cached     the same request again: the judge's cache answers
No GPU is needed (NVRTC and nvcc compile for --arch without one; NVRTC needs CuPy). Results go to
$OUT/compile_cost.json (default ./.out).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time

SMALL_KERNEL = r'''
#include <cuda_bf16.h>
extern "C" __global__ void scale(const __nv_bfloat16* x, __nv_bfloat16* y, float a, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(a * __bfloat162float(x[i]));
}
'''
CPP_EXTENSION = "torch::Tensor twice(torch::Tensor x) { return x * 2; }\n"
CUDA_EXTENSION = r'''
#include <torch/extension.h>
__global__ void twice_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2 * x[i];
}
torch::Tensor twice(torch::Tensor x) {
    auto y = torch::empty_like(x);
    twice_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
'''


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def summary(values: list[float]) -> dict:
    return {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "runs": values}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="fresh sources per compiler (small kernels)")
    parser.add_argument("--extension-repeats", type=int, default=1, help="fresh load_inline builds (slow)")
    parser.add_argument("--arch", default="90", help="the GPU architecture compiled for (no GPU needed)")
    parser.add_argument("--cuda", action="store_true", help="build a CUDA extension (needs CUDA torch)")
    args = parser.parse_args()
    out_dir = os.environ.get("OUT", "./.out")
    os.makedirs(out_dir, exist_ok=True)
    os.environ["PKB_ENV_CACHE"] = tempfile.mkdtemp(prefix="pkb-compile-cost-")  # cold cache

    from pkb_env import JudgeConfig
    from pkb_env.executors import make_executor
    from pkb_env.judge.compiler import KernelService
    from pkb_env.redaction import Redactor
    from pkb_env.runtime import toolchain

    backends = [b for b, ok in (("nvrtc", _has_cupy()), ("nvcc", toolchain.nvcc_path() is not None)) if ok]
    results: dict = {"arch": args.arch, "python": sys.version.split()[0]}
    config = JudgeConfig(executor="cpu", world_size=1)
    executor = make_executor(config)   # the compile service alone, on the executor's build cells (no judge step)
    try:
        service = KernelService(executor, Redactor.of_judge(), config)
        executor.prestart()
        results["isolation"] = executor.isolation()
        for backend in backends:
            direct, contained, cached = [], [], []
            for _ in range(args.repeats):
                source = f"// {secrets.token_hex(8)}\n{SMALL_KERNEL}"
                work = tempfile.mkdtemp()
                direct.append(timed(lambda: toolchain.nvrtc(source, [], args.arch) if backend == "nvrtc"
                                    else toolchain.nvcc(source, [], args.arch, work)))
                shutil.rmtree(work)
                request = {"kind": "compile", "source": f"// {secrets.token_hex(8)}\n{SMALL_KERNEL}",
                           "backend": backend, "arch": args.arch}
                contained.append(timed(lambda: _ok(service.handle(request))))
                cached.append(timed(lambda: _ok(service.handle(request))))
            results[backend] = {"direct": summary(direct), "contained": summary(contained), "cached": summary(cached)}
        source = CUDA_EXTENSION if args.cuda else CPP_EXTENSION
        direct, contained, cached = [], [], []
        for _ in range(args.extension_repeats):
            name = f"pkb_cost_{secrets.token_hex(4)}"
            work = tempfile.mkdtemp()
            cuda = [source] if args.cuda else []
            cpp = ["torch::Tensor twice(torch::Tensor x);"] if args.cuda else [source]
            direct.append(timed(lambda: toolchain.extension(name, cpp, cuda, ["twice"], [], [], work)))
            shutil.rmtree(work)
            request = {"kind": "load_inline", "name": name + "_c", "cpp_sources": cpp, "cuda_sources": cuda,
                       "functions": ["twice"]}
            contained.append(timed(lambda: _ok(service.handle(request))))
            cached.append(timed(lambda: _ok(service.handle(request))))
        results["load_inline" + ("_cuda" if args.cuda else "_cpp")] = {
            "direct": summary(direct), "contained": summary(contained), "cached": summary(cached)}
    finally:
        executor.close()
    print(f"{'compiler':<16}{'direct s':>22}{'contained s':>22}{'cached s':>22}")
    for key, value in results.items():
        if isinstance(value, dict) and "direct" in value:
            cells = [f"{value[k]['median_s']:.3f} ({value[k]['min_s']:.3f}-{value[k]['max_s']:.3f})"
                     for k in ("direct", "contained", "cached")]
            print(f"{key:<16}" + "".join(f"{c:>22}" for c in cells))
    path = os.path.join(out_dir, "compile_cost.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"(median (min-max) over runs; written to {path})")
    return 0


def _ok(answer) -> None:
    header, payload = answer
    if not header.get("ok") or not payload:
        raise RuntimeError(f"the compile service refused or failed: {header.get('error')}")


def _has_cupy() -> bool:
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
