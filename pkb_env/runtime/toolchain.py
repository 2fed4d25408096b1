"""The compilers behind `pkb_env.runtime`: NVRTC, nvcc and torch extension builds, as plain functions.

They compile in the process that calls them. Inside pkb-env that is a build cell the judge starts for
each build (sandbox/builder.py): contained like the ranks, as an unprivileged user, after the judge
checked the options and includes (judge/compile_checks.py). Outside pkb-env (debugging a candidate by
hand) `pkb_env.runtime` calls them in your own process. Nothing here caches or checks anything.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SOURCE_NAME = "candidate.cu"  # the name compiler messages give the candidate's CUDA source
ARCH_OPTIONS = ("-arch", "--gpu-architecture")


class CompileError(RuntimeError):
    """A compile or build failed; the message holds the compiler's diagnostics."""


def include_dirs() -> list[str]:
    """The CUDA toolkit's include directories (a system install, or the nvidia-* pip wheels)."""
    found = []
    for root in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "include", "cuda_fp16.h")):
            found.append(os.path.join(root, "include"))
            break
    for entry in sys.path:
        for sub in ("nvidia/cuda_runtime/include", "nvidia/cu13/include", "nvidia/cuda_nvrtc/include"):
            path = os.path.join(entry, sub)
            if os.path.isfile(os.path.join(path, "cuda_fp16.h")) and path not in found:
                found.append(path)
    return found


def nvcc_path() -> str | None:
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        path = os.path.join(root, "bin", "nvcc")
        if root and os.access(path, os.X_OK):
            return path
    return shutil.which("nvcc")


def _defaults(options: list[str], arch: str) -> list[str]:
    """The architecture and language standard, unless the options name their own."""
    chosen = [] if any(o.split("=")[0] in ARCH_OPTIONS for o in options) else [f"-arch=sm_{arch}"]
    return chosen + ([] if any(o.startswith(("-std", "--std")) for o in options) else ["-std=c++17"])


def nvrtc(source: str, options: list[str], arch: str) -> bytes:
    """CUDA C++ -> cubin with NVRTC (CuPy's bindings; no GPU or CUDA context needed)."""
    try:
        from cupy.cuda import nvrtc as api
    except ImportError as exc:
        raise CompileError(f"NVRTC needs CuPy, which is not importable here ({exc}); install pkb-env[cuda13] "
                           f"(or [cuda12]), or compile with backend='nvcc'") from None
    program = api.createProgram(source, SOURCE_NAME, [], [])
    try:
        try:
            api.compileProgram(program, [*_defaults(options, arch), *[f"-I{d}" for d in include_dirs()], *options])
        except api.NVRTCError:
            raise CompileError(api.getProgramLog(program)) from None
        return bytes(api.getCUBIN(program))
    finally:
        api.destroyProgram(program)


def nvcc(source: str, options: list[str], arch: str, directory: str, timeout: float = 300.0) -> bytes:
    """CUDA C++ -> cubin with nvcc, working in `directory`."""
    compiler = nvcc_path()
    if compiler is None:
        raise CompileError("nvcc is not installed here; use backend='nvrtc'")
    source_path, output = os.path.join(directory, SOURCE_NAME), os.path.join(directory, "candidate.cubin")
    Path(source_path).write_text(source)
    command = [compiler, "-cubin", *_defaults(options, arch), "-O3", *options, "-o", output, source_path]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=directory)
    except subprocess.TimeoutExpired:
        raise CompileError(f"nvcc took longer than {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise CompileError(proc.stderr or proc.stdout)
    return Path(output).read_bytes()


def extension(name: str, cpp_sources: list[str], cuda_sources: list[str], functions: list[str] | None,
              extra_cflags: list[str], extra_cuda_cflags: list[str], directory: str) -> tuple[Any, str]:
    """torch.utils.cpp_extension.load_inline in `directory`: (the imported module, the shared object's path).

    Importing runs the extension's static initialisers: candidate code. Inside pkb-env this happens only in
    a build cell or a rank's cell, never in the judge.
    """
    from torch.utils.cpp_extension import load_inline

    build = os.path.join(directory, name)
    os.makedirs(build, exist_ok=True)
    try:
        # Copies of the lists: load_inline adds its includes and bindings to the lists it is given.
        module = load_inline(name, list(cpp_sources), list(cuda_sources) or None, functions=functions,
                             extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, build_directory=build,
                             with_cuda=bool(cuda_sources), verbose=False)
    except (RuntimeError, OSError, ImportError, subprocess.CalledProcessError) as exc:
        raise CompileError(str(exc)) from None
    return module, os.path.join(build, f"{name}.so")
