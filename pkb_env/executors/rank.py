"""The code that runs inside a rank process: load a solution, run trials, time calls, hand back outputs.

A rank process is forked by the zygote, contains itself (own session, subreaper, resource limits, stdout
to a capped log file, a private working directory), joins the process group of its generation, and
then obeys the judge's messages. It knows only its own seeds. Candidate ranks are used for one step
and killed; reference ranks never run candidate code and are reused.

Operations (judge -> rank), each answered by events (rank -> judge):
  load   {task, source|None}              -> built {seconds} | error
  trials {preset, dtype, seeds, label}    -> trial {index, seconds, mutated, aliases} + outputs payload, per seed
  time   {preset, dtype, sets, warmup_sets, ...} -> timing {times, warmup}
  snapshots {indices}                     -> snapshot {index} + outputs payload, per index
  exit
Any failure is answered by `error {phase, message}`; the judge then ends the generation.
"""
from __future__ import annotations

import math
import os
import sys
import time
import traceback
import types
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, Callable, NoReturn

import torch
import torch.distributed as dist

from pkb_env.contract import GroupCache
from pkb_env.executors import channel
from pkb_env.executors.isolation import drop_privileges
from pkb_env.executors.limits import ResourceLimits, become_subreaper, set_parent_death_signal
from pkb_env.executors.peaks import measure_peaks
from pkb_env.executors.tripwire import JUDGE, tampered, watch
from pkb_env.runtime import link
from pkb_env.task import load_reference, load_task

CANDIDATE_FILE = "candidate.py"


class OutputError(TypeError):
    """The solution returned something the judge cannot accept as an output."""


class Tampered(RuntimeError):
    """The candidate replaced part of the judge's machinery in this process (see tripwire.py)."""


def run_forked(spec: dict, fd: int) -> NoReturn:
    """Entry point in the freshly forked child; never returns."""
    code = 0
    try:
        os.setsid()
        set_parent_death_signal()
        become_subreaper()
        workdir = spec["workdir"]
        os.chdir(workdir)
        log = os.open(os.path.join(workdir, f"rank{spec['rank']}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.environ.clear()
        os.environ.update(spec["env"])
        ResourceLimits(**spec["limits"]).apply()
        drop_privileges(spec.get("uid"))  # a uid change where possible, else no capabilities
        RankServer(Connection(fd), spec).serve()
    except BaseException:  # the judge sees the EOF and the log tail; nothing else to do here
        traceback.print_exc()
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class RankServer:
    def __init__(self, conn: Connection, spec: dict):
        self.conn = conn
        self.rank = spec["rank"]
        self.world_size = spec["world_size"]
        self.device = torch.device(spec["device"])
        self.task = None
        self.groups: dict[str, Any] = {}      # the loaded task's process groups, by mesh dimension
        self.group_cache = GroupCache()
        self.solution: Callable[..., Any] | None = None
        self.snapshots: list[Any] = []
        torch.set_num_threads(spec.get("threads", 1))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        store = dist.FileStore(spec["store"], self.world_size)
        eager = {"device_id": self.device} if spec["backend"] == "nccl" else {}  # NCCL init now, not mid-trial
        dist.init_process_group(spec["backend"], store=store, rank=self.rank, world_size=self.world_size,
                                timeout=timedelta(seconds=spec["pg_timeout_s"]), **eager)
        # The judge's own barriers and reductions run on a group of their own: a candidate's collectives
        # on the default group can never match (or mismatch) them.
        self.judge_group = dist.new_group(backend="gloo")
        link.attach(conn)  # kernel compiles are requested from the judge (pkb_env.runtime)

    # -- loop ------------------------------------------------------------------------------------
    def serve(self) -> None:
        self.send({"event": "ready"})
        handlers = {"load": self.load, "trials": self.trials, "time": self.time_calls,
                    "snapshots": self.send_snapshots, "calibrate": self.calibrate}
        while True:
            message, _ = channel.recv(self.conn)
            op = message.get("op")
            if op == "exit":
                return
            phase = message.get("label", op)
            try:
                handlers[op](message)
            except BaseException as exc:  # candidate code may raise anything, SystemExit included
                self.send({"event": "error", "phase": phase, "message": describe_exception(exc),
                           "tampered": isinstance(exc, Tampered)})

    def send(self, header: dict, payload: bytes | None = None) -> None:
        JUDGE.send(self.conn, {**header, "rank": self.rank}, payload)

    def check_tools(self) -> None:
        """After candidate code ran: the judge's tools must be what they were (see tripwire.py)."""
        changed = tampered(self, self.conn)
        if changed:
            raise Tampered(f"the candidate replaced {', '.join(sorted(set(changed))[:6])}")

    # -- operations --------------------------------------------------------------------------------
    def load(self, message: dict) -> None:
        start = JUDGE.clock()
        self.task = load_task(message["task"])
        # Before candidate code runs, so every rank builds them in step; once per mesh shape per generation.
        self.groups = self.group_cache.groups(self.task.layout(self.world_size), self.rank, self.task.group_dims)
        source = message.get("source")
        self.solution = load_reference(self.task.name) if source is None else load_candidate(source)
        self.check_tools()  # module-level code of the candidate has run
        self.send({"event": "built", "seconds": JUDGE.clock() - start})

    def trials(self, message: dict) -> None:
        for index, seeds in enumerate(message["seeds"]):
            args = self.make_inputs(message, seeds)
            pristine = clone_args(args)
            start = JUDGE.clock()
            out = self.solution(*args)
            check_size(out)
            # Copied on the current stream before any synchronisation, as a caller would use the result:
            # work left running on a side stream the candidate never joined races this copy.
            staged = stage(out)
            self.sync()
            seconds = JUDGE.clock() - start
            self.check_tools()
            header = {"event": "trial", "index": index, "seconds": seconds,
                      "aliases": aliases(out, args), "mutated": mutated(args, pristine)}
            self.send(header, JUDGE.pack({"output": export(staged)}))

    def time_calls(self, message: dict) -> None:
        """Barrier-aligned calls; each rank reports its own per-call times, the judge takes the max.

        Counts come from the first call's time reduced over ranks (every rank runs the same number of
        calls), bounded by time. Warm-up draws from its own input sets. Timed calls rotate over distinct
        input sets, all made before the first timed call: on CPU one per call, on a GPU enough that they
        exceed 3x the L2 cache, so no call finds its inputs in cache. Each output is copied on the device
        right after its call; the judge later asks for a secret sample of them.
        On CUDA each call is timed twice: CUDA events on the caller's stream (the figure of merit) and
        host time across a full device synchronisation (the cross-check for work the events miss).
        """
        warm_sets = [self.make_inputs(message, seeds) for seeds in message["warmup_sets"]]
        out, first, _ = self.timed_call(warm_sets[0])
        per_call = max(_max_over_ranks(first, self.judge_group), 1e-7)
        warmup = _clamp(math.ceil(message["warmup_s"] / per_call), message["min_warmup"], message["max_warmup"])
        calls = _clamp(math.ceil(message["measure_s"] / per_call), message["min_calls"], len(message["sets"]))
        calls = max(message["min_calls"], min(calls, message["snapshot_bytes"] // max(1, _nbytes(out))))
        sets = calls
        if self.device.type == "cuda":
            l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
            sets = _clamp(math.ceil(3 * l2 / max(1, _nbytes(warm_sets[0]))), 8, calls)
        calls, sets = _min_over_ranks([calls, sets], self.judge_group)
        inputs = [self.make_inputs(message, seeds) for seeds in message["sets"][:sets]]
        for i in range(warmup):
            self.timed_call(warm_sets[(i + 1) % len(warm_sets)])
        host, events, self.snapshots = [], [], []
        for i in range(calls):
            out, host_s, event_s = self.timed_call(inputs[i % sets])
            host.append(host_s)
            events.append(event_s)
            self.snapshots.append(stage(out))
            self.check_tools()
        self.send({"event": "timing", "times": host, "event_times": events if self.device.type == "cuda" else None,
                   "warmup": warmup + 1, "sets": sets})

    def send_snapshots(self, message: dict) -> None:
        for index in message["indices"]:
            self.send({"event": "snapshot", "index": index}, JUDGE.pack({"output": export(self.snapshots[index])}))

    def calibrate(self, message: dict) -> None:
        """Latency (a 4-byte all_reduce) and bus bandwidth (large all_reduces) of this placement's backend.

        Measured on the default group with the judge's timing loop and statistic, so the roofline's alpha
        and B come from the same machine, backend and method as the candidates' times.
        """
        self.solution = lambda t: dist.all_reduce(t)
        pick = min if message.get("statistic") == "min" else (lambda xs: sorted(xs)[len(xs) // 2])
        result = {"latency_s": None, "busbw": []}
        small = torch.ones(1, device=self.device)
        result["latency_s"] = _max_over_ranks(pick([_seconds(self.timed_call((small,))) for _ in range(50)]),
                                              self.judge_group)
        for size in message["sizes"]:
            big = torch.ones(size // 4, device=self.device)
            self.timed_call((big,))
            seconds = _max_over_ranks(pick([_seconds(self.timed_call((big,))) for _ in range(5)]), self.judge_group)
            factor = 2 * (self.world_size - 1) / self.world_size
            result["busbw"].append([size, factor * size / seconds])
        if self.device.type == "cuda" and self.rank == 0:
            result["peers"] = peer_copy_bandwidth(message["sizes"][-1])

        def run(fn, args):
            self.solution = fn
            return _seconds(self.timed_call(args))
        result["peaks"] = measure_peaks(run, pick, lambda v: _max_over_ranks(v, self.judge_group), self.device,
                                        self.rank, message["sizes"][-1])
        self.solution = None
        self.send({"event": "calibrated", "result": result})

    # -- helpers -----------------------------------------------------------------------------------
    def make_inputs(self, message: dict, seeds: dict[str, int]) -> tuple:
        rng = self.device if message.get("rng") == "device" else "cpu"
        ctx = self.task.input_context(self.rank, self.world_size, message["preset"], message["dtype"],
                                      self.device, seeds, rng, self.groups)
        return self.task.make_inputs(ctx)

    def timed_call(self, args: tuple) -> tuple[Any, float, float | None]:
        """(output, host seconds across a full device sync, CUDA-event seconds on the caller's stream)."""
        JUDGE.barrier(group=self.judge_group)
        self.sync()
        if self.device.type != "cuda":
            start = JUDGE.clock()
            out = self.solution(*args)
            return out, JUDGE.clock() - start, None
        begin, end = JUDGE.event(enable_timing=True), JUDGE.event(enable_timing=True)
        start = JUDGE.clock()
        begin.record()
        out = self.solution(*args)
        end.record()
        self.sync()  # a full device sync: work left on side streams is inside the host time
        host = JUDGE.clock() - start
        return out, host, begin.elapsed_time(end) / 1e3

    def sync(self) -> None:
        if self.device.type == "cuda":
            JUDGE.synchronize()


watch(RankServer, "send", "check_tools", "timed_call", "time_calls", "trials", "send_snapshots", "sync", "load")


def load_candidate(source: str) -> Callable[..., Any]:
    """Execute the candidate module from a file in the rank's private directory (for readable tracebacks)."""
    path = os.path.abspath(CANDIDATE_FILE)
    with open(path, "w") as f:
        f.write(source)
    module = types.ModuleType("candidate")
    module.__file__ = path
    sys.modules["candidate"] = module
    exec(compile(source, path, "exec"), module.__dict__)
    solution = getattr(module, "solution", None)
    if not callable(solution):
        raise AttributeError("the module does not define a callable `solution`")
    return solution


def export(obj: Any, path: str = "output") -> Any:
    """A detached CPU copy of an output, admitting only plain tensors, None, scalars and containers."""
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, torch.Tensor):
        if type(obj) is not torch.Tensor:
            raise OutputError(f"{path} is a {type(obj).__name__} (a tensor subclass); return a plain torch.Tensor")
        return JUDGE.to(JUDGE.detach(obj), "cpu", copy=True)
    if type(obj) in (tuple, list, torch.Size):
        items = [export(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        return list(items) if type(obj) is list else tuple(items)
    if type(obj) is dict:
        if not all(isinstance(k, str) for k in obj):
            raise OutputError(f"{path} is a dict with non-string keys")
        return {k: export(v, f"{path}[{k!r}]") for k, v in obj.items()}
    raise OutputError(f"{path} is a {type(obj).__name__}; outputs must be tensors, None, numbers, "
                      f"or tuples/lists/dicts of them")


MAX_OUTPUT_BYTES = 256 << 20


def check_size(obj: Any, limit: int = MAX_OUTPUT_BYTES) -> None:
    """Refuse outputs too large to be any task's answer before copying them anywhere."""
    size = _nbytes(obj)
    if size > limit:
        raise OutputError(f"the output holds {size / 2**20:.0f} MiB; the judge accepts at most "
                          f"{limit / 2**20:.0f} MiB per call (check the output's shape)")


def stage(obj: Any) -> Any:
    """Device-side copies of every tensor in an output, ordered on the current stream (no host sync)."""
    if isinstance(obj, torch.Tensor) and type(obj) is torch.Tensor:
        return JUDGE.clone(JUDGE.detach(obj))
    if type(obj) in (tuple, list):
        return type(obj)(stage(v) for v in obj)
    if type(obj) is dict:
        return {k: stage(v) for k, v in obj.items()}
    return obj  # export() rejects what is not allowed, with the path


def _tensors(obj: Any, path: str = "output"):
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{path}[{k!r}]")


def aliases(out: Any, args: tuple) -> list[str]:
    """Output paths whose storage is an input's storage (a view of an input is not a result)."""
    storages = {t.untyped_storage().data_ptr() for _, t in _tensors(args, "arg") if t.numel()}
    return [p for p, t in _tensors(out) if t.numel() and t.untyped_storage().data_ptr() in storages]


def clone_args(args: tuple) -> list[tuple[str, torch.Tensor]]:
    return [(p, JUDGE.clone(JUDGE.detach(t))) for p, t in _tensors(args, "argument")]


def mutated(args: tuple, pristine: list[tuple[str, torch.Tensor]]) -> list[str]:
    current = dict(_tensors(args, "argument"))
    return [p for p, before in pristine
            if current[p].shape != before.shape or not JUDGE.equal(JUDGE.detach(current[p]), before)]


def describe_exception(exc: BaseException) -> str:
    """The exception with the traceback frames that belong to the candidate's file, kept short."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(CANDIDATE_FILE)]
    lines = [f"  line {f.lineno}, in {f.name}: {f.line}" for f in frames[-4:]]
    text = f"{type(exc).__name__}: {exc}"
    return ("\n".join(lines + [text]) if lines else text)[:2000]


def peer_copy_bandwidth(size: int) -> list[list[float]]:
    """[src, dst, GB/s] of a copy-engine copy (tensor.copy_ across devices) for every ordered GPU pair."""
    table = []
    count = torch.cuda.device_count()
    for src in range(count):
        for dst in range(count):
            a = torch.empty(size, dtype=torch.uint8, device=f"cuda:{src}")
            b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dst}")
            b.copy_(a)
            torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
            times = []
            for _ in range(5):
                start = time.perf_counter()
                b.copy_(a)
                torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
                times.append(time.perf_counter() - start)
            table.append([src, dst, size / sorted(times)[2] / 1e9])
            del a, b
    return table


def _seconds(timed: tuple) -> float:
    """The figure of merit of a timed call: CUDA-event time where there is one, else host time."""
    return timed[2] if timed[2] is not None else timed[1]


def _nbytes(obj: Any) -> int:
    return sum(t.numel() * t.element_size() for _, t in _tensors(obj))


def _min_over_ranks(values: list[int], group) -> list[int]:
    t = torch.tensor(values, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return [int(v) for v in t]


def _max_over_ranks(value: float, group) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


watch(sys.modules[__name__], "export", "stage", "clone_args", "mutated", "aliases", "describe_exception",
      "_max_over_ranks", "_min_over_ranks")
