"""The judge's compile service: ranks ask (pkb_env.runtime), a build cell compiles, the judge keeps the bytes.

A candidate's kernels are candidate code too (docs/containment.md): nothing of a build runs in the
judge's process or as the judge's user, and a built module is imported only in a cell. For each request
(`KernelService.handle`, called while the judge waits on a step's ranks):
  1. the request is read back as the typed request it claims to be (wire/services.py: a frame out of schema
     is answered with an error), then checked as data (compile_checks.py): options against an allowlist per
     compiler, includes (no absolute paths, no ".."), no `.incbin`; a refusal names the option and what is
     allowed;
  2. the cache (keyed by a hash of the sources, options, architecture and compiler) answers, or the
     executor runs the build in a build cell (executors/builds.py, sandbox/builder.py: namespaces, the allowlisted root with
     the toolchain, an unprivileged uid, CPU, memory, process and file-size limits, a wall-clock deadline);
  3. this process writes the cache entry itself, from the bytes the cell returned, and the rank gets
     bytes (a cubin, a shared object), never a path. A failed build answers with the compiler's
     diagnostics about the candidate's own sources only, capped, the judge's secrets redacted.
The cache stays trusted: only this process writes it, only with what a contained build produced.

A build the compiler itself refused (it ran to its end and said why) is remembered beside where its bytes would
be, with the answer it gave: the same request fails the same way, and building it again cost a step its whole
trial (PKB's corpus on an H200: an extension that failed in the builds ahead was built again inside the file's
trial and timed out at 30 s, a runtime error instead of the build error it was; docs/pkb_corpus.md). A build
stopped by its deadline, a cell that died, or a compiler killed or short of a resource (`TRANSIENT`) is not
remembered: those may build next time.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path

from pkb_env.config import JudgeConfig
from pkb_env.executors.interface import Executor
from pkb_env.judge.compile_checks import (CompileRefused, check_cuda_options, check_host_options, check_sources,
                                          diagnostics)
from pkb_env.redaction import Redactor
from pkb_env.runtime.toolchain import SOURCE_NAME, nvcc_path
from pkb_env.wire.services import BuildRequest, Compile, LoadInline, ServiceRefused, parse_service

# Messages of a compile that failed for want of something other than correct sources (the host's memory or
# processes, a signal): such a failure is not remembered.
TRANSIENT = ("Killed", "signal", "Resource temporarily unavailable", "out of memory", "No space left",
             "Cannot allocate memory")
REMEMBERED = ("\n(the judge remembers this failure: the same sources and options failed to build before; "
              "change them to build again)")


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]


def compiler_version(backend: str) -> str:
    """Part of a cubin's cache key: the NVRTC version, or which nvcc."""
    if backend == "nvrtc":
        try:
            from cupy.cuda import nvrtc
        except ImportError:
            raise CompileRefused("NVRTC needs CuPy in the judge's environment (pip install 'pkb-env[cuda13]' or "
                                 "[cuda12]); or compile with backend='nvcc'") from None
        return "nvrtc-%d.%d" % nvrtc.getVersion()
    return nvcc_path() or "nvcc-missing"


class KernelService:
    """Answers rank requests ("compile", "load_inline") during a step; counts its own time."""

    def __init__(self, executor: Executor, redactor: Redactor, config: JudgeConfig):
        self.executor = executor    # runs builds in build cells (ProcessExecutor.build)
        self.redactor = redactor
        self.cache = Path(config.cache_dir)
        self.compile_timeout_s, self.extension_timeout_s = config.compile_timeout_s, config.extension_timeout_s
        self.seconds = 0.0
        self.requests = 0
        self.jobs = {Compile: self._compile_job, LoadInline: self._extension_job}

    def handle(self, header: dict, deadline: float | None = None) -> tuple[dict, bytes | None]:
        """Answer one request; a build gets its own timeout or what is left before `deadline` (the step's
        hard end, time.monotonic()), whichever is less."""
        start = time.perf_counter()
        self.requests += 1
        try:
            request = parse_service(header)
            job, path, own, timeout = self.jobs[type(request)](request)
            if path.is_file():
                return {"op": "reply", "ok": True}, path.read_bytes()
            failed = path.with_name(path.name + ".failed")
            if failed.is_file():
                return _error(failed.read_text() + REMEMBERED)
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    return _error("the step's time budget is spent; no compile can start now")
            outcome = self.executor.build(job, timeout)
            if not outcome.ok:
                message = self.redactor.redact(f"{_label(job)} failed:\n" +
                                               diagnostics(outcome.log, own, outcome.workdir))
                if outcome.answered and not any(word in outcome.log for word in TRANSIENT):
                    _store(failed, message.encode())
                return _error(message)
            _store(path, outcome.payload)
            return {"op": "reply", "ok": True}, outcome.payload
        except (CompileRefused, ServiceRefused) as exc:
            return _error(self.redactor.redact(str(exc)))
        except (KeyError, TypeError, ValueError) as exc:
            return _error(f"bad request: {type(exc).__name__}: {exc}")
        finally:
            self.seconds += time.perf_counter() - start

    def _compile_job(self, request: Compile) -> tuple[Compile, Path, set[str], float]:
        options = check_cuda_options(list(request.options), request.backend, request.arch)
        check_sources([("the CUDA source", request.source)])
        key = _key(request.source, options, request.backend, request.arch, compiler_version(request.backend))
        job = replace(request, options=tuple(options))
        return job, self.cache / "kernels" / f"{key}.cubin", {SOURCE_NAME}, self.compile_timeout_s

    def _extension_job(self, request: LoadInline) -> tuple[LoadInline, Path, set[str], float]:
        name, cpp, cuda = request.name, list(request.cpp_sources), list(request.cuda_sources)
        check_sources([(f"cpp_sources[{i}]", s) for i, s in enumerate(cpp)] +
                      [(f"cuda_sources[{i}]", s) for i, s in enumerate(cuda)])
        cflags = check_host_options(list(request.extra_cflags))
        cuda_cflags = check_cuda_options(list(request.extra_cuda_cflags), "nvcc", None)
        functions = list(request.functions) if request.functions is not None else None
        key = _key(name, cpp, cuda, functions, cuda_cflags, cflags)
        job = replace(request, extra_cflags=tuple(cflags), extra_cuda_cflags=tuple(cuda_cflags))
        own = {f"{name}/main.cpp", f"{name}/cuda.cu", "main.cpp", "cuda.cu"}
        return job, self.cache / "extensions" / key / f"{name}.so", own, self.extension_timeout_s


def _label(job: BuildRequest) -> str:
    if isinstance(job, Compile):
        return {"nvrtc": "NVRTC", "nvcc": "nvcc"}[job.backend]
    return f"building extension {job.name!r}"


def _error(message: str) -> tuple[dict, None]:
    return {"op": "reply", "ok": False, "error": message}, None


def _store(path: Path, payload: bytes) -> None:
    """Write a cache entry atomically (a reader never sees half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(payload)
    tmp.replace(path)
