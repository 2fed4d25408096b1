"""PKB's published corpus through the judge: the 383 kernels GPT-5.5, Claude Opus 4.7 and Gemini 3 Pro wrote for
ParallelKernelBench, judged unchanged (docs/pkb_corpus.md).

    python benchmarks/pkb_corpus.py PKB_CHECKOUT [--models gpt,opus] [--dataset DIR] [--json FILE]

PKB_CHECKOUT: a ParallelKernelBench clone with its history, or its git directory (read with git; PKB's files never
enter this repository). The five solutions_* folders were deleted from PKB's history and are read at each
deleting commit's parent (pkb_env/compat/checkout.py, CORPUS). For every file:
  map      to its task by PKB's problem name, then number (pkb_env/compat/files.py: the corpus has PKB's older
           88-problem numbering; fsdp_adamw_sharded has no task)
  screen   parse and screen against the signature of the statement that judges it (PKB's variant where the task has
           one): NVLink multicast refused with the screen's message (counted), other exploits flagged, signatures
           the judge cannot call unparsable. This much runs anywhere.
  build    (a GPU present) every extension a file asks `compile_cuda_extension` for with a literal name and a module
           string, built by --prebuild-workers judge services at once over one cache, at a lower CPU priority, in
           the background while the files whose builds have ended are judged (their steps find them cached), until
           the last fifth of --time-limit; or with all of it and nothing else with --prebuild-only. Builds that fail
           (compiler errors) are told apart from those the deadline stopped (built next call).
  judge    (a GPU present) correctness on cuda-emulated ranks at --world-size (4), preset --preset (bench) in
           --dtype (bfloat16), PKB's sizes and dtype: pkb-env's verdict, PKB's statement's where a variant exists,
           and PKB's own allclose check; once the builds are over, each file correct by some statement is timed,
           at world size --timing-world-size (1) on the cuda executor (a second judge beside the first), right
           after it is judged where that comes later, so that every call yields the speedups of what it judged
           and no build's load is in a timing. A file whose size the correctness run cannot take (a reference too
           heavy for the emulated ranks' CPU reference) is judged and timed in one step by the timing judge,
           and its row says so (judged_at). Steps start while 15 s are left of --time-limit; one running at
           the limit is stopped and its file left to the next call (--resume)
Without a GPU the steps that need one say so. Every judged or screened step is a row of the dataset --dataset DIR
(pkb_env/data). The table: one row per folder, with PKB's published zero-shot counts beside each model's CUDA row.
"""
from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil

from pkb_env import JudgeConfig
from pkb_env.client import LocalClient
from pkb_env.compat.checkout import CORPUS, PUBLISHED, Checkout, Folder
from pkb_env.compat.files import PkbFile, classify
from pkb_env.compat.helpers.cuda_helpers import cflags
from pkb_env.record import Severity, Verdict
from pkb_env.task import load_task
from pkb_env.runtime.kernels import CompileError, extension_request
from pkb_env.wire.services import LoadInline
from pkb_env.tables import table


@dataclass
class Entry:
    """One corpus file and what became of it."""

    folder: Folder
    file: PkbFile
    source: str
    screen: str = ""              # "" (passes), "multicast", "flagged", "unparsable", "no statement", "no task", "size"
    why: str = ""
    verdict: str | None = None    # pkb-env's (the task's own statement)
    pkb_verdict: str | None = None   # PKB's statement's where a variant judged, else None
    pkb_rule: bool | None = None  # PKB's own allclose on the trials
    failure: str = ""             # "timeout" where a rank hung
    speedup: float | None = None
    seconds: float | None = None  # the correctness step's wall time
    restored: bool = False        # read back from an earlier run's --json (--resume)
    timed: bool = False           # the speed step ran (or was not possible at its size)
    untimed: str = ""             # why a timed file has no speedup: its size there, or the speed step's verdict
    device: str = ""              # the GPU that timed it (calls may get different GPUs: H100 or H200)
    judged_at: str = ""           # "" (the correctness run), else where and why its correctness was judged elsewhere
    dtype: str = ""               # "" (the run's --dtype), else "the task's own" (the task does not take the run's)

    @property
    def key(self) -> str:
        return f"{self.file.path.parent.name}/{self.file.path.name}"

    @property
    def judged(self) -> bool:
        return bool(self.screen) or self.verdict is not None

    def row(self) -> dict:
        return {"key": self.key, "model": self.folder.model, "backend": self.folder.backend,
                "file": self.file.path.name, "task": self.file.task, "how": self.file.how, "screen": self.screen,
                "why": self.why, "verdict": self.verdict, "pkb_verdict": self.pkb_verdict, "pkb_rule": self.pkb_rule,
                "failure": self.failure, "seconds": self.seconds, "timed": self.timed, "speedup": self.speedup,
                "untimed": self.untimed, "device": self.device,
                "judged_at": self.judged_at, "dtype": self.dtype}

    def restore(self, row: dict) -> None:
        for name in ("screen", "why", "verdict", "pkb_verdict", "pkb_rule", "failure", "seconds", "timed",
                     "speedup", "untimed", "device", "judged_at", "dtype"):
            setattr(self, name, row.get(name, getattr(self, name)))
        self.restored = True


class Results:
    """The --json file, one line per file and step as each ends (a run stopped by its time limit, or killed, keeps
    what it decided); with --resume the lines already there are read back and those files are not judged again."""

    def __init__(self, path: Path | None, resume: bool):
        self.path, self.rows = path, {}
        if path is not None and resume and path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:   # a line cut by a kill
                    continue
                self.rows[row.get("key")] = row
        self.out = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.out = path.open("a" if resume else "w")
            if resume and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
                self.out.write("\n")   # end a line cut by a kill, so that the next one is a line of its own

    def restore(self, entries: list[Entry], again: str = "") -> int:
        """The entries decided by an earlier run, read back, but those `again` names (`wanted_again`): judged
        again, a later line superseding theirs."""
        found = [e for e in entries if e.key in self.rows and not wanted_again(e, again)]
        for e in found:
            e.restore(self.rows[e.key])
        return len(found)

    def write(self, e: Entry) -> None:
        if self.out is not None:
            self.out.write(json.dumps(e.row()) + "\n")
            self.out.flush()

    def close(self) -> None:
        if self.out is not None:
            self.out.close()


def wanted_again(e: Entry, again: str) -> bool:
    """Whether --again names `e`: a comma-separated list of MODEL:NUMBER (a part of the model's or folder's name and
    the corpus file's number, e.g. `gpt:41,opus:44`), for files to judge again after a fix of the judge."""
    for item in (part.strip() for part in again.split(",") if part.strip()):
        model, _, number = item.rpartition(":")
        label = f"{e.folder.model} {e.folder.backend} {e.folder.name}".lower()
        if model.lower() in label and str(e.file.number) == number:
            return True
    return False


class ByModel:
    """A dataset recorder (pkb_env.data.EpisodeRecorder) whose rows name the model and backend of the file being
    judged (the judge's service records each step it decides; the benchmark says whose file it is)."""

    def __init__(self, recorder):
        self.recorder, self.agent = recorder, None
        self.muted = False   # after a step stopped by the time limit (Judges.stop): its record is nobody's

    def record(self, record, completion, messages=None, **meta):
        if not self.muted:
            self.recorder.record(record, completion, messages, agent=self.agent, **meta)


def corpus(checkout: Checkout, models: list[str]) -> list[Entry]:
    entries = []
    for folder in CORPUS:
        label = f"{folder.model} {folder.backend} {folder.name}".lower()
        if models and not any(m.lower() in label for m in models):
            continue
        rev = f"{folder.deleted_in}^"
        for path in checkout.files(rev, folder.name):
            entries.append(Entry(folder, classify(Path(path)), checkout.read(rev, path)))
    entries.sort(key=lambda e: (CORPUS.index(e.folder), e.file.number or 0))
    return entries


# -- screening (anywhere) ------------------------------------------------------------------------------------------
def screen_all(entries: list[Entry], world_size: int, recorder) -> None:
    """Map and screen every file (no rank starts): the judge's own parse and screen, PKB's signature."""
    config = JudgeConfig(executor="cpu", world_size=world_size, preset="tiny", pkb=True)
    with LocalClient(config, recorder=recorder) as client:
        for e in entries:
            if e.restored:   # decided in an earlier run (--resume)
                continue
            if recorder is not None:
                recorder.agent = f"{e.folder.model} ({e.folder.backend})"
            if e.file.task is None:
                e.screen, e.why = "no task", e.file.why
                continue
            problem = client.problem(e.file.task, "tiny")
            if problem:
                e.screen, e.why = "size", problem
                continue
            record = client.run(lambda s, e=e: s.screen(s.open(e.file.task, "tiny", None, prestart=False), e.source))
            if record is None:
                continue
            exploits = [f for f in record.flags if f.severity is Severity.EXPLOIT]
            if record.verdict is Verdict.JUDGE_ERROR:   # no statement of this problem judges PKB files
                e.screen = "no statement"
            elif record.verdict is Verdict.FLAGGED:
                e.screen = "multicast" if any(f.code == "multicast" for f in exploits) else "flagged"
            else:
                e.screen = "unparsable"
            e.why = record.error or ""
            e.verdict = record.verdict.value


# -- building ahead (a GPU) ----------------------------------------------------------------------------------------
def build_requests(source: str) -> list[LoadInline]:
    """The extensions a file asks for with `compile_cuda_extension("name", SOURCE[, flags])`, where SOURCE is a
    string literal or a module-level name bound to one (anything built at run time is built during its step)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    strings = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
            if isinstance(value, str):
                strings[node.targets[0].id] = value
    found = []
    for node in ast.walk(tree):
        name = getattr(getattr(node, "func", None), "id", None) or getattr(getattr(node, "func", None), "attr", None)
        if not isinstance(node, ast.Call) or name != "compile_cuda_extension" or len(node.args) < 2:
            continue
        ext, src = node.args[0], node.args[1]
        if not (isinstance(ext, ast.Constant) and isinstance(ext.value, str)):
            continue
        text = src.value if isinstance(src, ast.Constant) else strings.get(getattr(src, "id", ""))
        flags = next((k.value for k in node.keywords if k.arg == "extra_cuda_cflags"), None)
        try:
            extra = ast.literal_eval(flags) if flags is not None else None
        except (ValueError, SyntaxError, TypeError):
            continue
        if isinstance(text, str):
            try:
                found.append(extension_request(ext.value, "", text, extra_cuda_cflags=cflags(extra)))
            except CompileError:   # refused as asked: the step says so
                continue
    return found


@dataclass
class Builds:
    """What prebuild did: each extension built (or found cached), failed (the compiler's or the checks' error: its
    steps will say so), stopped by the deadline (in flight then: built next call) or not started (left to the next
    call or to its step)."""

    built: int = 0
    failed: int = 0
    stopped: int = 0
    not_started: int = 0
    seconds: float = 0.0
    failures: tuple[str, ...] = ()   # "name: the error's first line", one per failed extension

    def __str__(self) -> str:
        return (f"built {self.built} extensions ahead (new or cached), {self.failed} failed (build errors), "
                f"{self.stopped} stopped by the deadline and {self.not_started} not started (both built by the "
                f"next call or their steps) in {self.seconds:.0f} s")


def build_outcome(error: str | None, until: float, now: float) -> str:
    """One build's outcome from the compile service's answer (`error`: None when built) at `now`: "built",
    "stopped" (an error within a second of the deadline `until`: the compile service stops a build there with an
    error, and a stopped build is what the next call must retry) or "failed: " and the error."""
    if error is None:
        return "built"
    return "stopped" if now >= until - 1 else f"failed: {error}"


BUILD_NICE = 10   # the builders' CPU priority below the judging beside them (nice(2): per thread on Linux)


class Prebuild:
    """The statically known extensions of every file still to judge or to time, built in the background by `workers`
    judge services into the judge's cache (each service one build at a time, all taking from one queue in the files'
    order, those to judge first), none past `until` (time.monotonic(): a build in flight gets what is left of it, then it is stopped;
    one not started by then is built by its step or a later call). Meanwhile the files whose builds have all ended
    are judged (`ready`): their steps find the extension cached, or the compiler's refusal remembered, so the
    judging of a call overlaps its builds instead of waiting for them (on one H200 the builds of 83 files take
    minutes of 16 cores, the correctness steps 1-4 s each).

    The builders' threads run at nice BUILD_NICE, and so do the service threads and build cells they start (a
    thread's nice value is inherited by the threads and processes it creates), so that the correctness steps'
    ranks beside them get the CPU first. `config`: the services' (default: the cuda executor's build cells, as
    the steps' own builds)."""

    def __init__(self, entries: list[Entry], workers: int, until: float, config: JudgeConfig | None = None):
        self.config = config or JudgeConfig(executor="cuda", world_size=1, pkb=True)
        # Files judged by an earlier call but not timed yet are built too: a machine's cache starts empty, and their
        # timing steps otherwise built inside their first call, one at a time (65-76 s each on one H100).
        waiting = [e for e in entries if not e.judged] + [e for e in entries if correct(e) and not e.timed]
        self.needs = {e.key: build_requests(e.source) for e in waiting}
        self.requests = list(dict.fromkeys(r for requests in self.needs.values() for r in requests))
        self.queue = list(self.requests)   # taken by the builders in order
        self.workers, self.until = max(1, workers), until
        self.outcomes: dict[LoadInline, str] = {}
        self.changed = threading.Condition()
        self.pool: ThreadPoolExecutor | None = None
        self.futures: list[concurrent.futures.Future] = []
        self.started = 0.0

    def start(self) -> "Prebuild":
        self.started = time.perf_counter()
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="prebuild")
        self.futures = [self.pool.submit(self._builder) for _ in range(min(self.workers, len(self.requests)))]
        return self

    def _builder(self) -> None:
        from pkb_env.service import JudgeService

        os.setpriority(os.PRIO_PROCESS, 0, BUILD_NICE)
        try:
            with JudgeService(self.config) as service:
                while (request := self._next()) is not None:
                    if time.monotonic() >= self.until - 5:
                        outcome = "not started"
                    else:
                        outcome = build_outcome(service.prebuild(request, self.until), self.until, time.monotonic())
                    with self.changed:
                        self.outcomes[request] = outcome
                        self.changed.notify_all()
        finally:
            with self.changed:   # a builder that could not go on: whoever waits looks again (running())
                self.changed.notify_all()

    def stop(self) -> None:
        """No build starts after this (those in flight end): the judging is over, or failed."""
        with self.changed:
            self.queue.clear()

    def _next(self) -> LoadInline | None:
        with self.changed:
            return self.queue.pop(0) if self.queue else None

    def running(self) -> bool:
        return any(not f.done() for f in self.futures)

    def ready(self, e: Entry) -> bool:
        """Whether every extension `e` asks for has ended (built, failed, stopped or not started), or no builder
        is left to end it."""
        with self.changed:
            return all(r in self.outcomes for r in self.needs.get(e.key, ())) or not self.running()

    def wait(self, timeout: float) -> None:
        """Until the next build ends, `timeout` seconds at most."""
        with self.changed:
            self.changed.wait(timeout)

    def result(self) -> Builds:
        """Waits for the builders, then what they did (a builder that failed to start raises here)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            for future in self.futures:
                future.result()
        results = [(r, self.outcomes.get(r, "not started")) for r in self.requests]
        outcomes = Counter(outcome.split(":")[0] for _, outcome in results)
        failures = tuple(f"{r.name}: {next((line for line in o.split(chr(10))[1:] if line.strip()), o)}"
                         for r, o in results if o.startswith("failed"))
        return Builds(outcomes["built"], outcomes["failed"], outcomes["stopped"], outcomes["not started"],
                      time.perf_counter() - self.started, failures)


def prebuild(entries: list[Entry], workers: int, until: float, config: JudgeConfig | None = None) -> Builds:
    """Prebuild's builds alone, waited for (--prebuild-only)."""
    return Prebuild(entries, workers, until, config).start().result()


# -- judging and timing (a GPU) ------------------------------------------------------------------------------------
MIN_LEFT_S = 15.0   # no step starts with less than this left before the run's time limit (a step takes ~2 s)
TIMING_SHARE = 0.2  # the end of a run no build may take: the correct files' speed, measured with the builds over


def gpu_configs(args) -> dict[str, JudgeConfig]:
    """The run's two judges: correctness on cuda-emulated ranks at --world-size, speed on the cuda executor at
    --timing-world-size."""
    return {"judge": JudgeConfig(executor="cuda-emulated", world_size=args.world_size, preset=args.preset,
                                 dtype=args.dtype, pkb=True, step_budget_s=args.step_budget),
            "time": JudgeConfig(executor="cuda", world_size=args.timing_world_size, preset=args.timing_preset,
                                dtype=args.dtype, pkb=True, step_budget_s=args.step_budget)}


class Judges:
    """The two judges of a run (`configs`: gpu_configs'), each a LocalClient opened when first needed; both stay
    alive for the whole run (one GPU holds both), so that each file is timed right after it is judged correct and
    every call yields speedups for what it judged. A step starts while at least `min_left` seconds are left before
    `until` (time.monotonic()) and is waited for until then; one still running at `until` is stopped by closing
    the judges (LocalClient.close interrupts the step in progress), its file left for the next call (--resume),
    its record unrecorded, and no step starts after."""

    def __init__(self, configs: dict[str, JudgeConfig], recorder, until: float, min_left: float = MIN_LEFT_S):
        self.configs, self.recorder, self.until, self.min_left = configs, recorder, until, min_left
        self.clients: dict[str, LocalClient] = {}
        self.stopped = False

    def client(self, kind: str) -> LocalClient:
        if kind not in self.clients:
            self.clients[kind] = LocalClient(self.configs[kind], recorder=self.recorder)
        return self.clients[kind]

    def dtype(self, kind: str, e: Entry) -> str:
        """The run's dtype for `e`'s task where the task takes it, else the task's own at the preset: PKB's bf16
        folders hold files of problems PKB states in float32 or float64 (its FFTs, spherical convolution,
        Kalman filter), which PKB's harness runs in their own dtype."""
        config = self.configs[kind]
        spec = load_task(e.file.task)
        return config.dtype if config.dtype in spec.dtypes else spec.resolve_dtype(config.preset, None)

    def time_left(self) -> bool:
        return not self.stopped and self.until - time.monotonic() >= self.min_left

    def step(self, kind: str, e: Entry):
        """`e`'s file judged by the `kind` judge: its EvaluationRecord, or None where the time limit stopped it."""
        if self.recorder is not None:
            self.recorder.agent = f"{e.folder.model} ({e.folder.backend})"
        dtype = self.dtype(kind, e)
        if dtype != self.configs[kind].dtype:
            e.dtype = "the task's own"
        future = self.client(kind).submit(e.file.task, e.source, dtype=dtype)
        left = self.until - time.monotonic()
        try:
            return future.result(timeout=None if left == float("inf") else max(left, 0.0))
        except concurrent.futures.TimeoutError:
            self.stop()
            return None

    def stop(self) -> None:
        """The time limit: whatever a stopped step's judge still records is dropped, and every judge closed."""
        self.stopped = True
        if self.recorder is not None:
            self.recorder.muted = True
        say("the time limit: the step in progress stopped, its judges closing")
        self.close()

    def close(self) -> None:
        while self.clients:
            self.clients.popitem()[1].close()

    def __enter__(self) -> "Judges":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def correct(e: Entry) -> bool:
    return Verdict.CORRECT.value in (e.verdict, e.pkb_verdict)


def judge_all(entries: list[Entry], configs: dict[str, JudgeConfig], recorder, results: Results, until: float,
              min_left: float = MIN_LEFT_S, builds: Prebuild | None = None) -> dict[str, int]:
    """Each file in turn: its correctness, every statement (a PKB variant's file is judged on PKB's statement and
    on pkb-env's), unless an earlier call judged it; then, where correct by some statement and not timed yet, its
    speed, at once (Judges). While `builds` (started) run, only correctness: the files whose builds have ended, in
    order, waiting for the next build where none is; a file's speed is measured once the builds are over, so that
    their load on the host is not in its timing. Each result is written as it ends; a step the time limit stops
    writes nothing. The files left to judge and to time."""
    with Judges(configs, recorder, until, min_left) as judges:
        while builds is not None and builds.running() and judges.time_left():
            e = next((e for e in entries if not e.judged and builds.ready(e)
                      and deciding_judge(judges, e)[0] == "judge"), None)   # nothing timed while builds run
            if e is None:
                builds.wait(1.0)
            else:
                judge_one(judges, e, results)
        for e in entries:
            if not e.judged and judges.time_left():
                judge_one(judges, e, results)
            if correct(e) and not e.timed and judges.time_left():
                time_one(judges, e, results)
            if not judges.time_left():
                break
    return {"to judge": sum(1 for e in entries if not e.judged),
            "to time": sum(1 for e in entries if correct(e) and not e.timed)}


def deciding_judge(judges: Judges, e: Entry) -> tuple[str | None, str]:
    """Which judge decides `e`'s correctness, and why not the correctness run where it cannot: "judge" (the
    correctness run), "time" (the correctness run cannot take its size, e.g. PKB's importance_sampling_loss at
    bench is too heavy for the emulated ranks' CPU reference, but the timing judge can: correctness and speed in
    one step there, at the timing judge's world size, which checks less of the communication), or None
    (neither can: the correctness run's problem)."""
    config = judges.configs["judge"]
    problem = judges.client("judge").problem(e.file.task, config.preset, judges.dtype("judge", e))
    if not problem:
        return "judge", ""
    timing = judges.configs["time"]
    if judges.client("time").problem(e.file.task, timing.preset, judges.dtype("time", e)) is None:
        return "time", problem
    return None, problem


def judge_one(judges: Judges, e: Entry, results: Results) -> None:
    kind, problem = deciding_judge(judges, e)
    if kind is None:
        e.screen, e.why = "size", problem
        results.write(e)
        return
    started = time.perf_counter()
    record = judges.step(kind, e)
    if record is None:   # stopped by the time limit: judged by the next call
        return
    e.seconds = round(time.perf_counter() - started, 1)
    e.why = record.error or ""
    e.pkb_rule = record.pkb.pkb_rule if record.pkb else None
    if record.pkb and record.pkb.statement == "pkb":
        e.pkb_verdict, e.verdict = record.verdict.value, record.pkb.pkb_env_verdict or "-"
    else:
        e.verdict = record.verdict.value
    if record.failure and any(f.kind == "timeout" for f in record.failure.failures):
        e.failure = "timeout"
    if kind == "time":
        timing = judges.configs["time"]
        e.judged_at = f"W={timing.world_size} ({timing.executor}): {problem}"
        take_speed(e, record)
    results.write(e)
    where = f" at W={judges.configs[kind].world_size} only" if kind == "time" else ""
    say(f"  {e.folder.model:16s} {e.file.path.name:60s} {record.verdict.value:14s} {e.seconds:6.1f} s{where}")


def time_one(judges: Judges, e: Entry, results: Results) -> None:
    """The speed of a file correct by some statement, at the timing judge's world size (none where its size
    cannot run there: timed all the same)."""
    config = judges.configs["time"]
    problem = judges.client("time").problem(e.file.task, config.preset, judges.dtype("time", e))
    if problem:
        e.untimed, e.timed = f"size: {problem}", True
    else:
        record = judges.step("time", e)
        if record is None:   # stopped by the time limit: timed by the next call
            return
        take_speed(e, record)
    results.write(e)
    speed = f"{e.speedup:.2f}x" if e.speedup is not None else f"no speedup ({e.untimed[:160]})"
    say(f"  {e.folder.model:16s} {e.file.path.name:60s} timed at W={config.world_size}: {speed}")


def take_speed(e: Entry, record) -> None:
    """The timing judge's step `record` as `e`'s speed (None, and why, where the step gave none)."""
    e.speedup, e.device, e.timed = record.speedup, gpu_name(), True
    if e.speedup is None:   # a first GPU run printed only "no speedup" for two correct files
        # the error alone can be a count ("3 mismatch(es)"): the feedback's opening lines say what was wrong
        e.untimed = f"{record.verdict.value}: {record.error or ''}; {record.feedback.strip()[:300]}"


# -- the table -----------------------------------------------------------------------------------------------------
def outcome(e: Entry) -> str | None:
    """`e`'s pkb-env verdict for the table: a runtime error that is the compiler's refusal counted as a build error
    (rows judged before the judge's verdict counted a build refused inside a file's first call as one:
    judge/verdict.py), and a correct file whose timed calls were wrong as wrong."""
    if e.verdict == Verdict.RUNTIME_ERROR.value and "CompileError: building extension" in e.why:
        return Verdict.BUILD_ERROR.value
    if e.verdict == Verdict.CORRECT.value and timed_wrong(e):
        return Verdict.WRONG.value
    return e.verdict


def timed_wrong(e: Entry) -> bool:
    """The timing judge found `e`'s timed calls wrong (outputs that differ from the reference's on the timed
    inputs: a cache keyed by address, a replay): the correctness run times nothing, so only there is it seen."""
    return e.untimed.startswith(f"{Verdict.WRONG.value}:")


def summary(entries: list[Entry], judged: bool) -> str:
    rows = []
    for folder in CORPUS:
        mine = [e for e in entries if e.folder == folder]
        if not mine:
            continue
        screens = Counter(e.screen for e in mine)
        verdicts = Counter(outcome(e) for e in mine if not e.screen)
        waiting = sum(1 for e in mine if not e.screen and e.verdict is None)
        correct = verdicts[Verdict.CORRECT.value]
        by_pkb = sum(1 for e in mine if e.pkb_verdict == Verdict.CORRECT.value
                     or (e.pkb_verdict is None and e.pkb_rule))   # PKB checks no timed call: timed_wrong counts
        speedups = [e.speedup for e in mine if e.speedup is not None]
        faster = sum(1 for s in speedups if s > 1)
        published = PUBLISHED.get(folder.model) if folder.backend == "cuda" else None
        gpu = "needs a GPU"
        rows.append([
            folder.model, folder.backend, len(mine), len(mine) - screens["no task"],
            screens["multicast"], screens["flagged"], screens["unparsable"] + screens["size"], screens["no statement"],
            waiting,
            correct if judged else gpu, by_pkb if judged else gpu,
            verdicts[Verdict.BUILD_ERROR.value] if judged else gpu,
            sum(1 for e in mine if e.failure == "timeout") if judged else gpu,
            verdicts[Verdict.RUNTIME_ERROR.value] if judged else gpu,
            verdicts[Verdict.WRONG.value] if judged else gpu,
            f"{faster} (median {statistics.median(speedups):.2f}x)" if speedups else ("-" if judged else gpu),
            f"{published[0]} / {published[1]}" if published else "",
        ])
    return table(["model", "backend", "files", "mapped", "multicast refused", "flagged", "unparsable", "no statement",
                  "to judge",
                  "correct (pkb-env)", "correct by PKB's rule", "build errors", "deadlocks/timeouts",
                  "runtime errors", "wrong", "faster at W=1", "PKB published correct / faster"], rows) + timed_on(entries) \
        + judged_elsewhere(entries)


def judged_elsewhere(entries: list[Entry]) -> str:
    """The files whose correctness the timing judge decided (deciding_judge), named."""
    moved = [e for e in entries if e.judged_at]
    return ("\ncorrectness judged by the timing judge only (the correctness run cannot take their size): "
            + ", ".join(f"{e.folder.model} {e.file.path.name}" for e in moved)) if moved else ""


def timed_on(entries: list[Entry]) -> str:
    """Which GPUs timed the speedups (a run's calls may get different ones; rows before this field say none)."""
    devices = Counter(e.device or "not recorded" for e in entries if e.speedup is not None)
    return ("\nspeedups timed on: " + ", ".join(f"{name} ({n})" for name, n in devices.most_common())) if devices else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a ParallelKernelBench clone with its history, its git dir, or a "
                                                    "folder of the solutions_* folders written by --extract")
    parser.add_argument("--extract", type=Path, default=None, metavar="DIR",
                        help="write the five solutions_* folders, each at its revision, into DIR and stop (for a "
                             "machine without PKB's history: pass DIR as the checkout there)")
    parser.add_argument("--models", default="", help="comma-separated parts of a model's or folder's name "
                                                     "(gpt, opus, gemini, triton, parallelkittens; default all)")
    parser.add_argument("--dataset", type=Path, default=None, help="record every step as a row of this dataset")
    parser.add_argument("--json", type=Path, default=None, help="write one line per file and step here, as each ends")
    parser.add_argument("--resume", action="store_true",
                        help="read --json's lines back and judge only the files it does not hold (append to it)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds for this run: builds stop and no step starts that could end past it; the "
                             "table is printed and the dataset closed; --resume continues")
    parser.add_argument("--again", default="", metavar="MODEL:N,...",
                        help="with --resume: judge these files again though --json holds them (after a fix of the "
                             "judge), e.g. gpt:41,opus:44 (a part of the model's name and the file's number)")
    parser.add_argument("--step-budget", type=float, default=90.0,
                        help="the hard budget of one judged step, compiles included (JudgeConfig.step_budget_s)")
    parser.add_argument("--world-size", type=int, default=4, help="ranks of the correctness run (default 4)")
    parser.add_argument("--preset", default="bench", help="the correctness run's preset (default bench: PKB's sizes)")
    parser.add_argument("--dtype", default="bfloat16", help="the files' dtype (default bfloat16, as PKB's)")
    parser.add_argument("--timing-world-size", type=int, default=1)
    parser.add_argument("--timing-preset", default="bench")
    parser.add_argument("--prebuild-workers", type=int, default=4,
                        help="judge services building extensions at once before judging (GPU runs)")
    parser.add_argument("--prebuild-only", action="store_true",
                        help="build the extensions of the files still to judge into the judge's cache (PKB_ENV_CACHE) "
                             "with the whole --time-limit, and judge nothing: a first call that builds, so that later "
                             "calls over the same cache only judge")
    args = parser.parse_args()
    if args.resume and args.json is None:
        parser.error("--resume reads the --json file of the runs before: name it")

    # --time-limit counts from the process's start, not from here: the imports before this line (torch, the
    # judge) took ~15 s on the device, and a run that counted from here was killed by its caller's limit
    # (gpu_batch.sh gave it 20 s more) while it stopped its last step.
    started = time.monotonic() - max(0.0, time.time() - STARTED)
    until = started + args.time_limit if args.time_limit else float("inf")
    checkout = Checkout(args.checkout)
    if args.extract is not None:
        for name, count in checkout.extract(CORPUS, args.extract).items():
            print(f"{count:3d} files  {args.extract / name}")
        return 0
    entries = corpus(checkout, [m for m in args.models.split(",") if m.strip()])
    results = Results(args.json, args.resume)
    restored = results.restore(entries, args.again)
    if restored:
        print(f"{restored} files read back from {args.json}", file=sys.stderr)
    recorder = None
    if args.dataset is not None:
        from pkb_env.data import EpisodeRecorder

        dataset = EpisodeRecorder(args.dataset, agent="pkb-corpus")
        recorder = ByModel(dataset)
    left = {}
    try:
        screen_all(entries, args.world_size, recorder)
        for e in entries:
            if e.screen and not e.restored:
                results.write(e)
        print(f"mapped and screened {len(entries)} files in {time.monotonic() - started:.1f} s", file=sys.stderr)
        judged = gpu_present()
        if judged and args.prebuild_only:
            builds = prebuild(entries, args.prebuild_workers, until)
            report_builds(builds)
            print(f"built only (--prebuild-only), into the judge's cache {JudgeConfig().cache_dir}: judge with the "
                  f"same command without it, that cache kept (PKB_ENV_CACHE)", file=sys.stderr)
        elif judged:
            # Builds run beside the judging, until what is left is the timing's share of the run.
            now = time.monotonic()
            build_until = until if until == float("inf") else until - (until - now) * TIMING_SHARE
            builds = Prebuild(entries, args.prebuild_workers, build_until).start()
            try:
                left = judge_all(entries, gpu_configs(args), recorder, results, until, builds=builds)
                say("judging over, its judges closed")
            finally:
                builds.stop()
                report_builds(builds.result())
        else:
            waiting = sum(1 for e in entries if not e.screen)
            print(f"no GPU here: building, judging and timing the {waiting} files that pass the screen needs a GPU "
                  f"(cuda-emulated ranks for correctness, the cuda executor for speed); run this command where "
                  f"one is", file=sys.stderr)
    finally:
        results.close()
        if recorder is not None:
            dataset.close()
    print(summary(entries, judged))
    refused = [e for e in entries if e.screen == "multicast"]
    if refused:
        print(f"\nmulticast refused: {len(refused)} files, e.g. {refused[0].file.path.name}: {refused[0].why[:300]}")
    for kind in ("flagged", "unparsable", "no statement", "no task", "size"):
        for e in (e for e in entries if e.screen == kind):
            print(f"{kind}: {e.folder.model} {e.folder.backend} {e.file.path.name}: {e.why[:200]}")
    if any(left.values()):
        print(f"\nthe time limit ({args.time_limit:.0f} s) ended this run with files left "
              f"({', '.join(f'{n} {what}' for what, n in left.items() if n)}): run the same command with --resume")
    print(f"\n{time.monotonic() - started:.0f} s in all")
    return 0


def say(line: str) -> None:
    """A progress line on stderr, with the seconds since the process started (where a run's time went)."""
    print(f"[{time.time() - STARTED:5.0f} s] {line}", file=sys.stderr, flush=True)


STARTED = psutil.Process().create_time()


def report_builds(builds: Builds) -> None:
    say(str(builds))
    for failure in builds.failures:
        print(f"  build failed: {failure[:200]}", file=sys.stderr)


def gpu_name() -> str:
    """The first GPU's name (the timing judge's ranks run there at W=1), "" without one."""
    import torch

    return torch.cuda.get_device_name(0) if gpu_present() else ""


def gpu_present() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


if __name__ == "__main__":
    sys.exit(main())
