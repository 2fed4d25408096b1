"""A rank set: N rank processes forked together in one cell, sharing one process group, driven by the judge.

Candidate rank sets serve one step and are killed with every process they started; the reference rank
set serves many steps. The ranks are forked by the rank set's cell (sandbox/cell.py), inside its
namespaces, so ending the cell ends everything the rank set started. Every wait has a deadline, and
none outlasts the step's hard deadline (`hard_deadline`, the config's step budget), compiles included.
When a rank raises, exits or is killed, the others get a moment to report, then the rank set is
declared failed with one RankFailure per rank that did not deliver, saying what happened ("rank 1 was
killed by SIGSEGV during trial 0").

Every request (wire/requests.py) goes out with a fresh nonce, and every frame that comes back is checked
against the schema of the answer the judge waits for (wire/messages.py): a frame that no honest rank
sends fails the rank with kind "forged", which the judge turns into an exploit flag. The rank set owns
the judge's release page (wire/gate.py): `release` starts a burst on every rank at once.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import send_handle
from typing import Any, Callable

from pkb_env.config import JudgeConfig
from pkb_env.executors.interface import Services
from pkb_env.executors.placement import Placement
from pkb_env.record import RankFailure
from pkb_env.sandbox.containment import Containment
from pkb_env.sandbox.limits import describe_status, kill_tree, running
from pkb_env.sandbox.zygote import Zygote
from pkb_env.wire import channel, messages
from pkb_env.wire.gate import ReleasePage
from pkb_env.wire.requests import Request, Start

LAST_PHASE = len(messages.START_PHASES) - 1
STACK_WAIT_S = 0.3   # for stuck ranks to write their stacks (faulthandler), before their failure is told
CANDIDATE_FRAME = re.compile(r'File "[^"]*candidate\.py", line (\d+) in (\w+)')  # faulthandler's form


class RankSetFailed(RuntimeError):
    """Some ranks of a rank set did not deliver: one RankFailure per such rank, saying what happened."""

    def __init__(self, failures: list[RankFailure]):
        super().__init__("; ".join(f.message for f in failures))
        self.failures = failures


@dataclass
class Delivery:
    header: dict[str, Any]
    payload: bytes | None
    received: float = 0.0  # the judge's monotonic clock when the frame was read


class RankSet:
    def __init__(self, zygote: Zygote, placement: Placement, config: JudgeConfig, env: dict[str, str], role: str,
                 root: str, uid: int | None = None, containment: Containment = Containment(),
                 progress: Callable[[str, str, int, int], None] | None = None, hold: bool = False):
        """Fork the ranks; they start at once. A start runs in phases (messages.START_PHASES: each rank's
        CUDA context, the process group with NCCL's communicator and connections, torch's symmetric memory,
        the warm-up of the kernels a step's requests launch). With `hold`, the ranks stop after the first
        until `advance`, so that the judge can run each phase when nothing is being timed."""
        self.placement = placement
        self.config = config
        self.role = role
        self.progress = progress  # progress(role, phase, ranks_done, world_size) as each rank completes a phase
        self.workdir = tempfile.mkdtemp(prefix=f"pkb-{role}-", dir=root)
        os.chmod(self.workdir, 0o700)
        if uid is not None:  # the ranks will run as `uid`: the directory is theirs, nothing else of ours is
            os.chown(self.workdir, uid, uid)
        try:
            self.cell = zygote.cell(self.workdir, containment)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self.conns: list[Connection] = []
        self.pids: list[int] = []
        self.asked = 0 if hold else LAST_PHASE  # the last phase of the start the ranks were asked to run
        self.done = -1                          # the last phase the judge knows every rank has finished
        self.closed = False
        self.facts: list[dict[str, Any]] = []    # per rank, from its ready event (before any candidate code)
        self.page = ReleasePage()
        self.nonce = ""
        self.services: Services | None = None    # answers the ranks' compile requests (judge/compiler.py)
        self.service_seconds = 0.0
        self.hard_deadline: float | None = None  # no wait of this rank set ends later (time.monotonic())
        self.loaded: str | None = None           # the task whose reference the ranks hold (reference rank sets)
        store = os.path.join(self.workdir, "store")
        for rank, device in enumerate(placement.devices):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            spec = {"rank": rank, "world_size": placement.world_size, "device": device,
                    "backend": placement.backend, "clock": placement.clock, "store": store, "workdir": self.workdir,
                    "env": {**env, "TMPDIR": self.workdir, "HOME": self.workdir,
                            "CUPY_CACHE_DIR": os.path.join(self.workdir, "cupy"),
                            "TRITON_CACHE_DIR": os.path.join(self.workdir, "triton")},
                    "limits": asdict(placement.limits), "pg_timeout_s": placement.pg_timeout_s, "uid": uid,
                    "cpu": placement.cpus[rank] if placement.cpus else None, "symmetric": placement.symmetric}
            self.pids.append(self.cell.spawn(spec, theirs.fileno()))
            theirs.close()
            conn = Connection(os.dup(ours.fileno()))
            ours.close()
            self.conns.append(conn)
            try:
                send_handle(conn, self.page.fd, self.pids[-1])  # the first thing the rank reads
            except OSError:
                pass  # the rank died already; wait_ready() will say how
        self._ask_phase()

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    # -- starting ----------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.done == LAST_PHASE

    @property
    def starting(self) -> bool:
        """A phase of the start is running (its ranks make contexts or communicators, or load kernels)."""
        return not self.closed and self.done < self.asked

    def _ask_phase(self) -> None:
        self.ask(Start(messages.START_PHASES[self.asked]))

    def settle(self) -> None:
        """Wait for the phase of the start that is running, without beginning the next."""
        if self.done < self.asked:
            final = self.asked == LAST_PHASE
            got = self.collect("ready" if final else "started", 1, self._start_deadline(), "start-up")
            if final:
                self.facts = [dict(d[0].header["facts"]) for d in got]
            self.done = self.asked

    def phase_over(self) -> bool:
        """Whether the phase of the start that was asked for has ended on every rank, without waiting: once
        every rank has something to read (its end of the phase, or the end of its channel), `settle` reads
        it. RankSetFailed where a rank failed."""
        if self.done >= self.asked:
            return True
        if not all(conn.poll(0) for conn in self.conns):
            return False
        self.settle()
        return True

    def _start_deadline(self) -> float:
        return time.monotonic() + self.config.start_timeout_s

    def advance(self, through: int | None = None) -> None:
        """Begin the next phase of a held start (or every phase up to `through`), after waiting for the
        one running; returns at once."""
        target = min(LAST_PHASE, self.asked + 1 if through is None else through)
        if target > self.asked:
            self.settle()
            self.asked = target
            self._ask_phase()

    def finish(self) -> None:
        """Ask for every phase not asked for yet (after waiting for the one running); returns at once."""
        self.advance(through=LAST_PHASE)

    def wait_ready(self) -> None:
        self.finish()
        self.settle()

    def ping(self) -> None:
        """`wait_ready`, then every rank answers once more, or RankSetFailed: a spare's `ready` may have
        waited in its channel since before a rank of it was killed. Asks for the start's last phase again
        (nothing left to run)."""
        self.wait_ready()
        self._ask_phase()
        self.collect("ready", 1, self._start_deadline(), "start-up")

    # -- messaging ---------------------------------------------------------------------------------
    def ask(self, requests: list[Request] | Request) -> str:
        """Send a request to every rank (one) or one per rank (a list) under a fresh nonce; the nonce."""
        self.nonce = messages.new_nonce()
        per_rank = requests if isinstance(requests, list) else [requests] * self.world_size
        for conn, request in zip(self.conns, per_rank):
            try:
                channel.send(conn, {**request.message(), "nonce": self.nonce})
            except OSError:
                pass  # the rank is gone; collect() will say how
        return self.nonce

    def release(self, epoch: int) -> float:
        """Start burst `epoch` on every rank (see gate.py); the judge's clock at the release."""
        return self.page.release(epoch)

    def quiet(self, phase: str) -> None:
        """No rank may have said anything the judge did not ask for: a stray frame is a forgery."""
        failures = []
        for rank, conn in enumerate(self.conns):
            try:
                while conn.poll(0):
                    header, payload = channel.recv(conn, time.monotonic() + 1.0)
                    if header.get("event") != messages.UNASKED or payload is not None:
                        raise messages.ForgedMessage(f"{str(header.get('event'))[:40]!r} that answers no request")
            except (OSError, EOFError, channel.ChannelClosed, channel.ChannelTimeout):
                continue  # a rank that is gone says nothing more
            except (channel.ChannelError, messages.ForgedMessage) as exc:
                failures.append(self._forged(rank, phase, exc))
        if failures:
            raise RankSetFailed(failures)

    def collect(self, event: str, count: int, deadline: float, phase: str,
                max_payload: int = 1 << 30, limit: str = "") -> list[list[Delivery]]:
        """`count` answers of kind `event` to the last request from every rank, or RankSetFailed.

        Time the judge spends serving the ranks' compile requests meanwhile extends `deadline` (it is not the
        ranks'), never past `hard_deadline`. `limit` names the deadline in a timeout's message (the config
        setting and its seconds)."""
        if self.hard_deadline is not None and self.hard_deadline < deadline:
            deadline = self.hard_deadline
            limit = f"step_budget_s = {self.config.step_budget_s:g} s, the step's budget"
        got: list[list[Delivery]] = [[] for _ in range(self.world_size)]
        failures: dict[int, RankFailure] = {}
        pending = {conn: rank for rank, conn in enumerate(self.conns)}
        while pending:
            if failures:
                deadline = min(deadline, time.monotonic() + self.config.failure_grace_s)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for conn in wait(list(pending), timeout=remaining):
                rank = pending[conn]
                try:
                    header, payload = channel.recv(conn, deadline, max_payload)
                    received = time.monotonic()
                    messages.check(header, payload is not None, event, self.nonce, rank)
                except channel.ChannelTimeout:
                    continue
                except channel.ChannelClosed:
                    failures[rank] = self._ended(rank, phase)
                    del pending[conn]
                    continue
                except (channel.ChannelError, messages.ForgedMessage) as exc:
                    failures[rank] = self._forged(rank, phase, exc)
                    del pending[conn]
                    continue
                kind = header["event"]
                if kind == messages.UNASKED:
                    deadline += self._serve_request(conn, header)  # the judge's own time is not the rank's
                    if self.hard_deadline is not None:
                        deadline = min(deadline, self.hard_deadline)
                    continue
                if kind == "error":  # a rank's own account of its failure: it can only make a verdict worse
                    failures[rank] = RankFailure(rank, "tampered" if header["tampered"] else "exception",
                                                 f"rank {rank} raised during {header['phase']}: "
                                                 f"{header['message']}", phase)
                    del pending[conn]
                else:
                    got[rank].append(Delivery(header, payload, received))
                    if len(got[rank]) == count:
                        del pending[conn]
                        if self.progress is not None:
                            self.progress(self.role, phase, self.world_size - len(pending), self.world_size)
        if pending and not failures:
            late = sorted(pending.values())
            done = ", ".join(map(str, (r for r in range(self.world_size) if r not in late))) or "none"
            where = self._where(late)
            within = f" within {limit}" if limit else " in time"
            for rank in late:  # one text for all: the judge's account names them together (judge/candidate.py)
                failures[rank] = RankFailure(
                    rank, "timeout", f"rank {rank} did not finish {phase}{within} (a hang, a deadlock or an "
                    f"infinite loop; ranks finished: {done}){where}", phase)
        if failures:
            for failure in failures.values():
                failure.log_tail = self.log_tail(failure.rank)
            raise RankSetFailed([failures[r] for r in sorted(failures)])
        return got

    def _where(self, ranks: list[int]) -> str:
        """Where `ranks` are stuck in the candidate's module, in words: each dumps its Python stacks to a file
        of its directory on SIGUSR1 (ranks/server.py registers faulthandler before candidate code loads; code
        that undoes that just goes unlocated), read back after a moment. Only lines and functions are told."""
        for rank in ranks:
            try:
                os.kill(self.pids[rank], signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(STACK_WAIT_S)
        places: dict[str, list[int]] = {}
        for rank in ranks:
            try:
                with open(os.path.join(self.workdir, f"rank{rank}.stacks"), errors="replace") as f:
                    dump = f.read(1 << 16)
            except OSError:
                continue
            frames = CANDIDATE_FRAME.findall(dump.split("Current thread", 1)[-1])
            if frames:
                line, function = frames[0]
                places.setdefault(f"line {line} of the module, in {function}", []).append(rank)
        if not places:
            return ""
        return "; stuck at " + "; ".join(f"{place}: {'ranks' if len(who) > 1 else 'rank'} {', '.join(map(str, who))}"
                                         for place, who in places.items())

    def _serve_request(self, conn: Connection, header: dict) -> float:
        start = time.monotonic()
        budget = self.config.compile_budget_s
        if self.services is None:
            reply, payload = {"op": "reply", "ok": False, "error": "no services for these ranks"}, None
        elif self.service_seconds > budget:
            reply, payload = {"op": "reply", "ok": False, "error": f"this step used its {budget:.0f} s "
                                                                   f"of judge-side compile time"}, None
        else:
            reply, payload = self.services(header, self.hard_deadline)
        try:
            channel.send(conn, reply, payload)
        except OSError:
            pass
        spent = time.monotonic() - start
        self.service_seconds += spent
        return spent

    @staticmethod
    def _forged(rank: int, phase: str, exc: Exception) -> RankFailure:
        return RankFailure(rank, "forged", f"rank {rank} sent a message no honest rank sends during {phase}: "
                                           f"{exc}", phase)

    def _ended(self, rank: int, phase: str) -> RankFailure:
        status = self.cell.status_of(self.pids[rank], wait=1.0)
        kind = "signal" if status is not None and os.WIFSIGNALED(status) else "exit"
        return RankFailure(rank, kind, f"rank {rank} {describe_status(status)} during {phase}", phase)

    def log_tail(self, rank: int) -> str:
        try:
            with open(os.path.join(self.workdir, f"rank{rank}.log"), "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - self.config.log_tail_bytes))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return ("..." if size > self.config.log_tail_bytes else "") + text

    # -- teardown ----------------------------------------------------------------------------------
    def alive(self) -> bool:
        """Every rank still running (a pre-started rank set can be killed by whoever ran before it)."""
        if self.closed or not self.cell.alive():
            return False
        self.cell.drain()
        return all(pid not in self.cell.exit_status and running(pid) for pid in self.pids)

    def retire(self) -> None:
        """Start ending the rank set without waiting (`close` waits and cleans up). Only for a contained
        rank set: its cell's end kills the namespace's PID 1, and the kernel every process in it, so
        nothing of it runs code again whatever it does meanwhile; its ranks' CUDA contexts may still be
        coming down."""
        if not self.cell.contained:
            raise RuntimeError("only a contained rank set ends without being waited for")
        self.cell.end()

    def close(self) -> list[int]:
        """Kill every process of the rank set and delete its directory; returns pids that survived."""
        if self.closed:
            return []
        self.closed = True
        self.cell.close()
        self.page.close()
        survivors = kill_tree(self.pids)  # already dead where the cell had a PID namespace
        for conn in self.conns:
            conn.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return survivors
