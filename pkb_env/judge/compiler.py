"""The judge's compile service: CUDA source -> cubin (NVRTC or nvcc), torch extensions -> shared objects.

It runs in the judge, never in a candidate process, so the cache it keeps (keyed by a hash of the
source, options, architecture and compiler) is written by trusted code only, and every rank of a step
(and every later step) reuses one compile. NVRTC via CuPy's low-level bindings needs no CUDA context,
so compiling works on a machine without a GPU too (it only cannot run the result).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pkb_env.executors.environment import rank_environment

MAX_LOG_CHARS = 3000


class CompileError(RuntimeError):
    pass


def cache_root() -> Path:
    base = os.environ.get("PKB_ENV_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pkb_env")
    return Path(base)


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]


def compile_to_cubin(source: str, options: list[str], backend: str, arch: str) -> bytes:
    if backend not in ("nvrtc", "nvcc"):
        raise CompileError(f"unknown compiler backend {backend!r}; use 'nvrtc' or 'nvcc'")
    if not str(arch).isdigit():
        raise CompileError(f"bad architecture {arch!r}")
    path = cache_root() / "kernels" / f"{_key(source, options, backend, arch, _compiler_version(backend))}.cubin"
    if path.is_file():
        return path.read_bytes()
    cubin = (_nvrtc if backend == "nvrtc" else _nvcc)(source, options, arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(cubin)
    tmp.replace(path)
    return cubin


def _compiler_version(backend: str) -> str:
    if backend == "nvrtc":
        from cupy.cuda import nvrtc

        return "nvrtc-%d.%d" % nvrtc.getVersion()
    return _nvcc_path() or "nvcc-missing"


def _include_dirs() -> list[str]:
    found = []
    candidates = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for root in candidates:
        if root and os.path.isfile(os.path.join(root, "include", "cuda_fp16.h")):
            found.append(os.path.join(root, "include"))
            break
    for entry in sys.path:
        for sub in ("nvidia/cuda_runtime/include", "nvidia/cu13/include", "nvidia/cuda_nvrtc/include"):
            p = os.path.join(entry, sub)
            if os.path.isfile(os.path.join(p, "cuda_fp16.h")) and p not in found:
                found.append(p)
    return found


def _nvrtc(source: str, options: list[str], arch: str) -> bytes:
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, "candidate.cu", [], [])
    opts = [f"-arch=sm_{arch}", "-std=c++17", *[f"-I{d}" for d in _include_dirs()], *options]
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            raise CompileError("NVRTC: " + _trim(nvrtc.getProgramLog(prog))) from None
        return bytes(nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)


def _nvcc_path() -> str | None:
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        path = os.path.join(root, "bin", "nvcc")
        if root and os.access(path, os.X_OK):
            return path
    return shutil.which("nvcc")


def _nvcc(source: str, options: list[str], arch: str) -> bytes:
    nvcc = _nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc is not installed here; use backend='nvrtc'")
    with tempfile.TemporaryDirectory(prefix="pkb-nvcc-") as tmp:
        src, out = os.path.join(tmp, "candidate.cu"), os.path.join(tmp, "candidate.cubin")
        Path(src).write_text(source)
        cmd = [nvcc, "-cubin", f"-arch=sm_{arch}", "-O3", "-std=c++17", *options, "-o", out, src]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise CompileError("nvcc took longer than 300 s") from None
        if proc.returncode != 0:
            raise CompileError("nvcc: " + _trim(proc.stderr or proc.stdout))
        return Path(out).read_bytes()


BUILD_SCRIPT = r"""
import json, sys
from torch.utils.cpp_extension import load_inline
spec = json.load(sys.stdin)
load_inline(spec["name"], spec["cpp_sources"], spec["cuda_sources"] or None, functions=spec["functions"],
            extra_cflags=spec["extra_cflags"], extra_cuda_cflags=spec["extra_cuda_cflags"],
            build_directory=spec["build_directory"], with_cuda=bool(spec["cuda_sources"]), verbose=False)
"""


def build_extension(name: str, cpp_sources: list[str], cuda_sources: list[str], functions: list[str] | None,
                    extra_cuda_cflags: list[str], extra_cflags: list[str], timeout: float = 900.0) -> str:
    """Build a torch extension once (in a throwaway process: its initialisers are candidate code)."""
    if not name.isidentifier():
        raise CompileError(f"extension name {name!r} must be a Python identifier")
    key = _key(name, cpp_sources, cuda_sources, functions, extra_cuda_cflags, extra_cflags)
    build = cache_root() / "extensions" / key
    so = build / f"{name}.so"
    if so.is_file():
        return str(so)
    build.mkdir(parents=True, exist_ok=True)
    spec = {"name": name, "cpp_sources": cpp_sources, "cuda_sources": cuda_sources, "functions": functions,
            "extra_cflags": extra_cflags, "extra_cuda_cflags": extra_cuda_cflags, "build_directory": str(build)}
    env = rank_environment({"HOME": str(build), "TMPDIR": str(build)})
    try:
        proc = subprocess.run([sys.executable, "-c", BUILD_SCRIPT], input=json.dumps(spec), capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=build, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise CompileError(f"building extension {name!r} took longer than {timeout:.0f} s") from None
    if proc.returncode != 0 or not so.is_file():
        raise CompileError(f"building extension {name!r} failed: " + _trim(proc.stderr or proc.stdout))
    return str(so)


def _trim(log: str) -> str:
    """The compiler's first errors: logs run long and the first error is the one that matters."""
    lines = [l for l in log.splitlines() if l.strip()]
    errors = [i for i, l in enumerate(lines) if "error" in l.lower()]
    start = max(0, errors[0] - 2) if errors else 0
    text = "\n".join(lines[start:start + 30])
    return text[:MAX_LOG_CHARS]


class KernelService:
    """Answers rank requests ("compile", "load_inline") during a step; counts its own time."""

    def __init__(self):
        self.seconds = 0.0
        self.requests = 0

    def handle(self, header: dict) -> tuple[dict, bytes | None]:
        start = time.perf_counter()
        self.requests += 1
        try:
            kind = header.get("kind")
            if kind == "compile":
                cubin = compile_to_cubin(str(header["source"]), [str(o) for o in header.get("options", [])],
                                         str(header.get("backend", "nvrtc")), str(header["arch"]))
                return {"op": "reply", "ok": True}, cubin
            if kind == "load_inline":
                path = build_extension(str(header["name"]), list(header["cpp_sources"]),
                                       list(header["cuda_sources"]), header.get("functions"),
                                       list(header.get("extra_cuda_cflags", [])), list(header.get("extra_cflags", [])))
                # The bytes, not the path: unprivileged ranks cannot read the judge's cache.
                return {"op": "reply", "ok": True}, Path(path).read_bytes()
            return {"op": "reply", "ok": False, "error": f"unknown request {kind!r}"}, None
        except CompileError as exc:
            return {"op": "reply", "ok": False, "error": str(exc)}, None
        except (KeyError, TypeError, ValueError, ImportError) as exc:
            return {"op": "reply", "ok": False, "error": f"bad request: {type(exc).__name__}: {exc}"}, None
        finally:
            self.seconds += time.perf_counter() - start
