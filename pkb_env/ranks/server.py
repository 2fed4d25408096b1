"""The code that runs inside a rank process: load a solution, run trials and bursts, fingerprint outputs.

A rank process is forked by its rank set's cell, contains itself (own session, subreaper, resource
limits, stdout to a capped log file, a private working directory), receives the judge's release page
(wire/gate.py), joins the process group of its rank set, makes its communicators' connections, and then
obeys the judge's requests. It knows only its own seeds. Candidate ranks are used for one step and
killed; reference ranks never run candidate code and are reused.

Requests are the typed ones of wire/requests.py (read back as strictly as they were made); every answer
echoes the request's nonce (wire/messages.py has the answers' schemas):
  Start        -> started, or ready {facts} after the last phase (the phases up to the asked one not run yet)
  Load         -> built {seconds}    (and the task's process groups, before candidate code; a PKB-format
                                     file with PKB's helpers importable, called through the task's adapter)
  Trials       -> trial {index, seconds, aliases, mutated, shares, ...} + outputs, per seed
  Burst        -> gated, then (after the judge's release) burst {times}
  Fingerprints -> fingerprints + payload (of the last burst)
  Replay       -> gated, then burst {times} (reference ranks: the candidate's calls; Fingerprints next)
  Copies       -> copies {table} (rank 0 of the reference: copy-engine rates)
Any failure is answered by `error {phase, message, tampered}`; the judge then ends the rank set.
The judge decides every count (calls per burst, bursts, which outputs to ship in full); a rank only
reports what it measured, and the judge checks that against its own clock.
"""
from __future__ import annotations

import faulthandler
import linecache
import os
import signal
import sys
import traceback
import types
from dataclasses import replace
from datetime import timedelta
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle
from typing import Any, Callable

import torch
import torch.distributed as dist

from pkb_env.compat import helpers
from pkb_env.compat.adapter import adapt
from pkb_env.contract import GroupCache
from pkb_env.ranks import bursts, compilers, fingerprints, host_staged, probes  # noqa: F401 (compilers: wrapped)
from pkb_env.ranks.clocks import BurstTimes, make_clock
from pkb_env.ranks.outputs import (OutputError, aliases, check_size, clone_args, export, mutated, nbytes, shared_with,
                                  stage, unchanged, updated)
from pkb_env.ranks.tripwire import JUDGE, tampered, watch
from pkb_env.runtime import link
from pkb_env.runtime.symmetric import SymmetricBuffer
from pkb_env.sandbox import cores
from pkb_env.sandbox.limits import file_size_advice
from pkb_env.task import load_reference, load_task
from pkb_env.wire import channel, requests
from pkb_env.wire.gate import PageView
from pkb_env.wire.messages import START_PHASES
from pkb_env.wire.requests import (Burst, CollectiveWorkload, Copies, Fingerprints, Load, ProbeWorkload,
                                   Replay, Start, TaskWorkload, Trials, Workload)

CANDIDATE_FILE = "candidate.py"
WARM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # the presets' dtypes, warmed at a start
SYMMETRIC_WARM_BYTES = 4096  # the start's symmetric buffer (`symmetric`): the set-up, not the size, is the cost
RELEASE_WAIT_S = 600.0  # a rank waits this long for a release before it gives up (the judge died)


class Tampered(RuntimeError):
    """The candidate replaced part of the judge's machinery in this process (see tripwire.py)."""


def serve(spec: dict, fd: int) -> None:
    """The rank's life after its cell forked and contained it (sandbox/forking.run_child): serve requests."""
    RankServer(Connection(fd), spec).serve()


class RankServer:
    def __init__(self, conn: Connection, spec: dict):
        """The first phase of a start ("context"): the rank's own state and its CUDA context (a large share
        of a GPU rank's start: docs/measurements/2026-12-01-timing-h200.md). The others run when the judge asks
        (`start`)."""
        started = JUDGE.clock()
        self.conn = conn
        self.page = PageView(recv_handle(conn))  # the judge sends it before anything else
        self.spec = spec
        self.rank = spec["rank"]
        self.world_size = spec["world_size"]
        self.device = torch.device(spec["device"])
        self.gpu = self.device.type == "cuda"
        self.task = None
        self.groups: dict[Any, dict[str, Any]] = {}  # the loaded task's process groups: per mesh layout, by span
        self.group_cache = GroupCache()
        self.solution: Callable[..., Any] | None = None
        self.pkb = False   # the loaded solution is a PKB-format file: called through the task's PKB adapter
        self.held: bursts.HeldBurst | None = None
        self.staged: tuple[bursts.Workload, list[tuple]] | None = None  # the last burst's inputs, to refill
        self._workloads: dict[Workload, bursts.Workload] = {}
        self.nonce = ""
        self.clock = None
        self.phase = 0  # the last of messages.START_PHASES run
        torch.set_num_threads(1)
        # Where a stuck rank is, when the judge asks (SIGUSR1): its stacks go to a file of their own, not to the
        # log whose tail the agent reads.
        self.stacks = open(os.path.join(spec["workdir"], f"rank{self.rank}.stacks"), "w")
        faulthandler.register(signal.SIGUSR1, file=self.stacks, all_threads=True)
        if self.gpu:
            torch.cuda.set_device(self.device)
            torch.cuda.current_stream(self.device).synchronize()  # the context exists once this returns
            # float32 means float32 on every rank, as on CPU ranks: cuDNN's convolutions default to TF32 (10-bit
            # mantissas), which puts a plain fp32 conv outside an fp32 tolerance (opensora_conv3d_allreduce's
            # reference failed on emulated ranks). Candidate code may turn it on; its results then answer for it.
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        self.facts: dict[str, Any] = {"context_s": JUDGE.clock() - started}
        # Kernel compiles are requested from the judge (pkb_env.runtime); the link never sees the channel module.
        send, recv = channel.send, channel.recv
        link.attach(lambda header: (send(conn, header), recv(conn))[1])

    def group(self) -> None:
        """The process group (NCCL's communicator, made now rather than mid-trial; for candidates on emulated
        ranks the host-staged group, on CPU ranks gloo with NCCL's forms, its transport checked:
        ranks/host_staged.py), the clock, and the connections and kernels of the collectives the tasks use."""
        spec = self.spec
        started = JUDGE.clock()
        store = dist.FileStore(spec["store"], self.world_size)
        if spec["backend"] == host_staged.NAME:
            host_staged.register(stage="cuda" if self.gpu else None)  # CPU ranks: NCCL's forms, nothing staged
        eager = {"device_id": self.device} if spec["backend"] == "nccl" else {}
        dist.init_process_group(spec["backend"], store=store, rank=self.rank, world_size=self.world_size,
                                timeout=timedelta(seconds=spec["pg_timeout_s"]), **eager)
        grouped = JUDGE.clock()
        self.clock = make_clock(spec["clock"], self.page, self.device)
        if spec["backend"] == "nccl":
            _connect(self.device)
        elif spec["backend"] == host_staged.NAME:
            host_staged.check_transport(self.device)  # proven before a candidate relies on it: else the start fails
        self.facts.update(self.clock.facts(), group_s=grouped - started, connect_s=JUDGE.clock() - grouped)

    def symmetric(self) -> None:
        """torch's symmetric memory set up before any candidate arrives, where the placement asks for it: a
        fresh rank's first `symm_mem.empty` + `rendezvous` cost a large part of a step's trials, the next ones
        milliseconds (docs/measurements/2026-12-03-timing-h200.md, "Symmetric memory set up in the start, CuPy
        imported before the fork"). One small
        buffer is made, rendezvoused over the world group, its barrier run and its pointers read (the
        kernels a candidate's first buffer launches), then dropped: it holds nothing, and no candidate's
        data was ever in this process. Where the platform has no symmetric memory the start goes on (NCCL
        candidates need none) and the facts say why."""
        if not (self.gpu and self.spec.get("symmetric")):
            return
        started = JUDGE.clock()
        try:
            made = SymmetricBuffer((SYMMETRIC_WARM_BYTES,), torch.uint8)
            made.local.zero_()
            made.barrier()
            pointers = (made.ptrs, made.signal_pad_ptrs)  # their copies to the device, as a candidate's first
            torch.cuda.synchronize(self.device)
            del made, pointers
            self.facts["symmetric_s"] = JUDGE.clock() - started
        except Exception as exc:  # noqa: BLE001  (the judge's own set-up: a platform without it is not a failure)
            self.facts["symmetric"] = f"unavailable: {describe_exception(exc)[:300]}"

    def warm(self) -> None:
        """The kernels of a step's own requests, loaded before the step (`_rehearse`)."""
        started = JUDGE.clock()
        _rehearse(self.device)
        self.clock.sync()
        self.facts["warm_s"] = JUDGE.clock() - started

    # -- loop ------------------------------------------------------------------------------------
    def serve(self) -> None:
        handlers = {Start: self.start, Load: self.load, Trials: self.trials, Burst: self.burst,
                    Fingerprints: self.fingerprints, Replay: self.replay, Copies: self.copies}
        while True:
            message, _ = channel.recv(self.conn)  # an object (channel.recv refuses anything else)
            self.nonce, label = str(message.get("nonce", "")), str(message.get("label", "a request"))[:200]
            try:
                request, self.nonce = requests.parse(message)
                if not isinstance(request, (Burst, Fingerprints)):
                    self.staged = None  # staged inputs serve one timing session: its bursts follow one another
                handlers[type(request)](request)
            except BaseException as exc:  # candidate code may raise anything, SystemExit included
                self.send("error", phase=label, message=describe_exception(exc), tampered=isinstance(exc, Tampered))

    def pin(self) -> None:
        """Every thread of this rank on the core rank r of every rank set runs on, where the placement gives one
        (sandbox/cores.py): set once this rank serves a step, not while it starts as a spare."""
        if self.spec.get("cpu") is not None:
            cores.pin_process(self.spec["cpu"])

    def send(self, event: str, payload: bytes | None = None, **fields: Any) -> None:
        JUDGE.send(self.conn, {"event": event, "nonce": self.nonce, "rank": self.rank, **fields}, payload)

    def check_tools(self) -> None:
        """After candidate code ran: the judge's tools must be what they were (see tripwire.py)."""
        changed = tampered(self, self.conn)
        if changed:
            raise Tampered(f"the candidate replaced {', '.join(sorted(set(changed))[:6])}")

    # -- operations --------------------------------------------------------------------------------
    def start(self, request: Start) -> None:
        """Run the phases of the start up to `phase` that have not run, in order (a held spare is asked
        for one at a time, so that the judge runs each when nothing is being timed). Asked for the last
        again, it only answers (the judge's `ping` of a spare before use)."""
        target = START_PHASES.index(request.phase)
        if target < self.phase:
            raise RuntimeError(f"phase {request.phase} of the start has run already")
        steps = {"group": self.group, "symmetric": self.symmetric, "warm": self.warm}
        for name in START_PHASES[self.phase + 1:target + 1]:
            steps[name]()
        self.phase = target
        if target == len(START_PHASES) - 1:
            self.send("ready", facts=self.facts)
        else:
            self.send("started")

    def load(self, request: Load) -> None:
        start = JUDGE.clock()
        self.pin()   # before candidate code: threads it makes inherit the core
        self.task = load_task(request.task)
        # Before candidate code runs, so every rank builds them in step; once per mesh shape per rank set, for
        # every preset's mesh (a mesh sized by a preset's dims differs by preset; contract/mesh.py).
        self.groups = {layout: self.group_cache.groups(layout, self.rank, self.task.group_dims)
                       for layout in self.task.layouts(self.world_size)}
        source = request.source
        self.pkb = request.pkb
        if self.pkb:
            helpers.install()   # PKB's `utils.*` helpers, for this candidate's imports (pkb_env/compat/helpers)
        self.solution = load_reference(self.task.name) if source is None else load_candidate(source, self.rank)
        self._workloads.clear()
        self.check_tools()  # module-level code of the candidate has run
        self.send("built", seconds=JUDGE.clock() - start)

    def trials(self, request: Trials) -> None:
        held: list[Any] = []  # every trial's output stays alive, so shared memory between them means reuse
        for index, seeds in enumerate(request.seeds):
            workload = self.workload(request.workload_of(index))
            args = workload.make(seeds)
            pristine = clone_args(args)
            start = JUDGE.clock()
            out = workload.call(*args)
            workload.check(out)
            # Copied on the current stream before any synchronisation, as a caller would use the result:
            # work left running on a side stream the candidate never joined races this copy.
            staged, results = stage(out), updated(args, workload.inplace)
            self.clock.sync()
            seconds = JUDGE.clock() - start
            self.check_tools()
            payload = {"output": export(staged), "updated": export(results)}
            self.send("trial", JUDGE.pack(payload), index=index, seconds=seconds, aliases=aliases(out, args),
                      mutated=mutated(args, pristine, tuple(workload.inplace.values())),
                      unchanged=unchanged(args, pristine, tuple(workload.inplace.values())),
                      shares=shared_with(out, held), input_bytes=nbytes(args), output_bytes=nbytes(out))
            held.append(out)

    def burst(self, request: Burst) -> None:
        """One timed burst (bursts.py); the outputs are held for `fingerprints`."""
        self.held = None  # the previous burst's outputs go before this burst's sets are made
        self.pin()        # the calibration's bursts come before any load
        workload = self.workload(request.workload)
        staged, self.staged = self.staged, None   # its inputs stay, refilled: every burst on the same buffers
        sets = bursts.make_sets(workload, request.seeds, request.calls,
                                into=staged[1] if staged and staged[0] is workload else None)
        deadline = JUDGE.monotonic() + RELEASE_WAIT_S
        self.held, times = bursts.timed_burst(workload, sets, self.clock, request.epoch, request.marks_every,
                                              request.capture_every, deadline, lambda: self.send("gated"))
        self.staged = (workload, sets)  # refilled by the next burst, after any fingerprints of these
        self.check_tools()
        self.report(times)

    def fingerprints(self, request: Fingerprints) -> None:
        held, self.held = self.held, None
        if held is None:
            raise RuntimeError("no burst to fingerprint")
        data = bursts.fingerprints(held, request.seed, request.rules, list(request.sample), bound=held.bound)
        self.check_tools()  # a candidate's thread may have patched the fingerprinting meanwhile
        self.send("fingerprints", JUDGE.pack(data), burst=request.burst)

    def replay(self, request: Replay) -> None:
        """The reference's half of a pair: a candidate's burst on the same inputs, timed as a burst; held for
        `fingerprints`, which adds the comparison's bound terms (only trusted ranks are asked to replay)."""
        self.held = None
        workload = self.workload(request.workload)
        sets = bursts.make_sets(workload, request.seeds, request.calls)
        held, times = bursts.timed_burst(workload, sets, self.clock, request.epoch, request.marks_every, False,
                                         JUDGE.monotonic() + RELEASE_WAIT_S, lambda: self.send("gated"))
        self.held = replace(held, bound=True)
        self.report(times)

    def report(self, times: BurstTimes) -> None:
        """A burst's times, as the judge's clock check reads them (judge/timing.py, `check_claims`)."""
        self.send("burst", seen_at=times.seen_at, ended_at=times.ended_at, busy_s=times.busy_s,
                  host_s=times.host_s, idle_s=times.idle_s, wait_s=times.wait_s, marks=times.marks)

    def copies(self, request: Copies) -> None:
        wanted = self.gpu and request.bytes > 0
        self.send("copies", table=peer_copy_rates(request.bytes) if wanted else [])

    # -- helpers -----------------------------------------------------------------------------------
    def workload(self, spec: Workload) -> bursts.Workload:
        """What a request's calls run: the loaded solution on a task's inputs, a bare collective (calibration),
        or a probe of the machine's peaks (calibration, probes.py)."""
        key = spec
        if key not in self._workloads:
            if isinstance(spec, CollectiveWorkload):
                self._workloads[key] = _collective(spec.bytes, self.device)
            elif isinstance(spec, ProbeWorkload):
                call, args = probes.probe(spec, self.device, self.rank)
                self._workloads[key] = bursts.Workload(call, lambda seeds: args)
            else:
                if self.task is None or self.solution is None:
                    raise RuntimeError("no solution loaded")
                if not isinstance(spec, TaskWorkload) or spec.task != self.task.name:
                    raise RuntimeError(f"a workload of {getattr(spec, 'task', spec)!r}; {self.task.name!r} is loaded")
                task, device, groups = self.task, self.device, self.groups
                preset, dtype, rng = spec.preset, spec.dtype, spec.rng
                rng_device = device if rng == "device" else "cpu"

                layout = task.layout(self.world_size, task.preset(preset).dims)
                if layout not in groups:
                    raise RuntimeError(f"no process groups were built for the mesh {layout.describe()}")
                groups = groups[layout]

                def make(seeds: dict[str, int], rank=self.rank, world=self.world_size) -> tuple:
                    return task.make_inputs(task.input_context(rank, world, preset, dtype, device, seeds, rng_device,
                                                               groups))

                dims, world = task.preset(preset).dims, self.world_size

                def check(out: Any) -> None:
                    check_size(out)
                    problems = task.bound_problems(out, dims, world)
                    if problems:
                        raise OutputError("; ".join(problems[:3]))

                solution = self.solution
                if self.pkb:   # the judge's adapter around the PKB file's solution (contract/pkb.py, compat/adapter.py)
                    solution = adapt(task, solution, task.env(dims, world), self.rank, world, layout)
                self._workloads[key] = bursts.Workload(solution, make, task.inplace_positions, check)
        return self._workloads[key]


watch(RankServer, "send", "report", "check_tools", "burst", "trials", "fingerprints", "replay", "load")


def _connect(device: torch.device) -> None:
    """Make the default NCCL group's connections now, while the rank set is pre-started (not in a step).

    NCCL sets up the transport of a collective on its first use (ring buffers, peer-to-peer channels), and
    CUDA loads each of its kernels (one per collective, operation and dtype) on its first launch; each kind
    the tasks use is run once here on a few bytes, in the dtypes of the presets, so a step's first call
    does not pay for either.
    """
    world = dist.get_world_size()
    for dtype in WARM_DTYPES:
        x = torch.zeros(world * 8, device=device, dtype=dtype)
        dist.all_reduce(x[:8])
        dist.broadcast(x[:8], src=0)
        dist.all_gather_into_tensor(x, x[:8].clone())
        dist.reduce_scatter_tensor(x[:8].clone(), x)
        dist.all_to_all_single(torch.empty_like(x), x)
    torch.cuda.synchronize(device)


def _rehearse(device: torch.device) -> None:
    """Run the kernels of a step's own requests once, on small tensors, while the rank set is a spare.

    Every candidate rank set is fresh, and CUDA loads a kernel on its first launch: the first trial's
    input draws and copies, and above all the first fingerprint (float64 projections, integer words),
    paid for that loading in every step (the first fingerprint in a fresh process most of all:
    docs/measurements/2026-12-01-timing-h200.md, "What a warm step's time went to"). This is the same code the
    requests run (draws as the tasks' distributions make them, `stage`, `export`, `fingerprint_calls` of both kinds, the
    reference's bound terms), on nothing secret.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    n = 2 * fingerprints.MIN_BLOCK  # two blocks: the projected path's per-block sums
    values: list[Any] = []
    for dtype in (*WARM_DTYPES, torch.float64):
        x = torch.randn(n, generator=gen, device=device, dtype=torch.float32).to(dtype)
        u = torch.empty(n, device=device).uniform_(generator=gen).to(dtype)
        values += [stage(x), u]
        export(x)
    ints = torch.randint(0, 7, (n,), generator=gen, device=device, dtype=torch.int64)
    values += [ints, ints.to(torch.int32), ints > 3]
    fingerprints.fingerprint_calls(values, 1, {"output": [1e-2, 1e-2, False]}, bound=True)
    fingerprints.fingerprint_calls(values, 2, None)


def _collective(size: int, device: torch.device) -> bursts.Workload:
    """A bare all_reduce on one buffer, nccl-tests' way (the calibration's workload; CollectiveWorkload
    admits no other collective)."""
    buffer = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
    return bursts.Workload(lambda t: dist.all_reduce(t), lambda seeds: (buffer,))


def load_candidate(source: str, rank: int) -> Callable[..., Any]:
    """Execute the candidate module, its source readable through `inspect` on this rank whatever its peers do.

    Libraries read a module's source back: TorchScript compiles `@torch.jit.script` functions from it, and
    `inspect.getsource` serves tracebacks and introspection. Every rank of a rank set works in one directory,
    and each used to write the same `candidate.py` there, so a rank's TorchScript could read the file while a
    peer had truncated it to write it again: `OSError: Can't get source`, a build error on a different rank
    each run (issue 42). Each rank now writes a file of its own, and puts the exact text it compiles in
    `linecache` as loaded (no modification time: `linecache.checkcache` never drops it for the disk's), so what
    `inspect` reads is what runs even if the candidate rewrites its file later.
    """
    path = os.path.abspath(f"rank{rank}.{CANDIDATE_FILE}")
    with open(path, "w") as f:
        f.write(source)
    linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)
    module = types.ModuleType("candidate")
    module.__file__ = path
    sys.modules["candidate"] = module
    exec(compile(source, path, "exec"), module.__dict__)
    solution = getattr(module, "solution", None)
    if not callable(solution):
        raise AttributeError("the module does not define a callable `solution`")
    return solution


def describe_exception(exc: BaseException) -> str:
    """The exception with the traceback frames that belong to the candidate's file, kept short."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(CANDIDATE_FILE)]
    lines = [f"  line {f.lineno}, in {f.name}: {f.line}" for f in frames[-4:]]
    text = f"{type(exc).__name__}: {exc}"
    advice = file_size_advice(exc)   # a write past the rank's file-size cap: say the cap and the fix
    if advice:
        text += f" ({advice})"
    return ("\n".join(lines + [text]) if lines else text)[:2000]


def peer_copy_rates(size: int, copies: int = 10) -> list[list[float]]:
    """[src, dst, GB/s] of copy-engine copies (tensor.copy_ across devices) for every ordered GPU pair.

    Timed like a burst: `copies` copies back to back, one synchronisation of both devices at the end.
    """
    table = []
    count = torch.cuda.device_count()
    for src in range(count):
        for dst in range(count):
            a = torch.empty(size, dtype=torch.uint8, device=f"cuda:{src}")
            b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dst}")
            b.copy_(a)
            torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
            start = JUDGE.clock()
            for _ in range(copies):
                b.copy_(a)
            torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
            table.append([src, dst, size * copies / (JUDGE.clock() - start) / 1e9])
            del a, b
    return table


watch(sys.modules[__name__], "describe_exception", "load_candidate")
