"""The pool's dispatcher: a queue of steps, one step per actor at a time, deadlines, retries, replacements.

Ray's `ActorPool` hands work to actors but has no notion of an actor's health: one dead or hung actor
poisons it (ray-project/ray#50313). This is the small loop of our own that the issue of a judge needs,
on Ray's own parts (docs/scale_out.md, "Faults"):
- an actor judges one step at a time (its timings must be the only work on its devices); the rest queue,
  in order, and `submit` waits for room when `queue_limit` steps already do (backpressure);
- a step that outruns `step_timeout_s` has its actor killed (`ray.kill`: the zygote and every rank go
  with the process); Ray restarts the actor (`max_restarts`) and the step is tried once more elsewhere;
- a step whose actor died under it (process killed, node lost) is tried once more on another actor; a
  second failure, of either kind, is the judge's: the step comes back as `Verdict.JUDGE_ERROR`, never as
  the candidate's fault; so does a step still unjudged at its batch's deadline (its actor killed too);
- an actor that died gets no step until it answers a health call again with its judge started (Ray restarts
  it meanwhile: a step sent to a restarting actor would fail for nothing, and one sent to an actor whose judge
  is still starting would wait for that start while another actor may be free); one that Ray could not bring
  back is replaced by a new one in the same bundle of the placement group.
Ray's own task retries stay off (`max_task_retries=0`): whether to retry depends on why the step failed,
and a retried step is a fresh attempt with a deadline of its own.
"""
from __future__ import annotations

import collections
import threading
import time
import traceback
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Callable

from pkb_env.pool.cluster import ray_module
from pkb_env.record import EvaluationRecord


@dataclass(eq=False)
class Step:
    """One submitted step and what became of it."""

    task: str
    code: str
    preset: str | None
    dtype: str | None
    future: Future
    unjudged: Callable[[str], EvaluationRecord]    # the JUDGE_ERROR record of this step, given why
    attempts: int = 0
    failures: list[str] = field(default_factory=list)
    deadline: float | None = None                   # monotonic: the batch's deadline, when one was given
    judged: Callable[[EvaluationRecord], None] | None = None   # told each judged record before its future is set


@dataclass(eq=False)
class Slot:
    """One actor of the pool and the step it is judging."""

    index: int
    handle: Any
    step: Step | None = None
    ref: Any = None
    started: float = 0.0
    deaths: int = 0
    probe: Any = None            # a health call in flight: the actor died and is not yet back (no step goes to it)
    probe_after: float | None = None   # when to ask again (it was still restarting)

    @property
    def free(self) -> bool:
        return self.step is None and self.probe is None and self.probe_after is None


@dataclass
class Stats:
    submitted: int = 0
    judged: int = 0
    retried: int = 0
    unjudged: int = 0
    actor_deaths: int = 0
    actors_killed: int = 0
    actors_replaced: int = 0


class Dispatcher:
    """Runs in one daemon thread of the driver; the pool's front (pool.py) only enqueues and waits."""

    POLL_S = 0.05

    def __init__(self, slots: list[Slot], make_actor: Callable[[int], Any], step_timeout_s: float, queue_limit: int,
                 max_restarts: int):
        self.slots, self.make_actor = slots, make_actor
        self.step_timeout_s, self.queue_limit, self.max_restarts = step_timeout_s, queue_limit, max_restarts
        self.queue: collections.deque[Step] = collections.deque()
        self.stats = Stats()
        self.lock = threading.Condition()
        self.closing = False
        self.thread = threading.Thread(target=self._loop, name="pkb-pool-dispatcher", daemon=True)
        self.thread.start()

    # -- the front's side -----------------------------------------------------------------------------
    def enqueue(self, step: Step, timeout_s: float) -> bool:
        """Queue `step`, waiting up to `timeout_s` for room; False if none came."""
        end = time.monotonic() + timeout_s
        with self.lock:
            while len(self.queue) >= self.queue_limit and not self.closing:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, 0.5))
            if self.closing:
                return False
            self.queue.append(step)
            self.stats.submitted += 1
            self.lock.notify_all()
        return True

    def set_deadline(self, steps: list[Step], deadline: float) -> None:
        with self.lock:
            for step in steps:
                if step.deadline is None or deadline < step.deadline:
                    step.deadline = deadline
            self.lock.notify_all()

    def busy(self) -> int:
        with self.lock:
            return sum(slot.step is not None for slot in self.slots)

    def queued(self) -> int:
        with self.lock:
            return len(self.queue)

    def close(self) -> list[Step]:
        """Stop the loop; the steps it still held (queued or in flight), for the front to settle."""
        with self.lock:
            self.closing = True
            self.lock.notify_all()
        self.thread.join(timeout=10)
        with self.lock:
            left = list(self.queue) + [slot.step for slot in self.slots if slot.step is not None]
            self.queue.clear()
            for slot in self.slots:
                slot.step, slot.ref = None, None
        return left

    # -- the loop ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        """Never dies of one bad answer: whatever a turn raises is the judge's own bug, printed, and the loop
        goes on (a dead dispatcher would leave every future waiting)."""
        while not self.closing:
            try:
                self._turn()
            except Exception:
                traceback.print_exc()
                time.sleep(self.POLL_S)

    def _turn(self) -> None:
        ray = ray_module()
        while True:
            with self.lock:
                if self.closing:
                    return
                now = time.monotonic()
                self._expire(now)
                self._probe(now)
                self._assign()
                flying = {slot.ref: slot for slot in self.slots if slot.ref is not None}
                probes = {slot.probe: slot for slot in self.slots if slot.probe is not None}
                if not flying and not probes:
                    self.lock.wait(self.POLL_S)
                    continue
            ready, _ = ray.wait([*flying, *probes], num_returns=len(flying) + len(probes), timeout=self.POLL_S)
            for ref in ready:
                if ref in flying:
                    self._finish(flying[ref], ref)
                else:
                    self._answered(probes[ref], ref)

    def _probe(self, now: float) -> None:
        for slot in self.slots:
            if slot.probe_after is not None and now >= slot.probe_after:
                slot.probe_after, slot.probe = None, slot.handle.health.remote()

    def _answered(self, slot: Slot, ref: Any) -> None:
        """A dead actor's health answer: back with its judge started (steps may go to it), restarting or starting
        its judge (ask again), or gone (replace it)."""
        ray = ray_module()
        try:
            back = not ray.get(ref).get("starting")
        except ray.exceptions.ActorDiedError:
            back = None
        except Exception:
            back = False
        with self.lock:
            if slot.probe is not ref:
                return
            slot.probe = None
            if back is None:
                self._replace(slot)
            elif not back:
                slot.probe_after = time.monotonic() + 0.5
            self.lock.notify_all()

    def _assign(self) -> None:
        for slot in self.slots:
            if slot.free and self.queue:
                step = self.queue.popleft()
                step.attempts += 1
                slot.step, slot.started = step, time.monotonic()
                slot.ref = slot.handle.judge.remote(step.task, step.code, step.preset, step.dtype)
                self.lock.notify_all()   # room in the queue

    def _finish(self, slot: Slot, ref: Any) -> None:
        ray = ray_module()
        try:
            value = ray.get(ref)
        except ray.exceptions.RayActorError as exc:   # died under the step (killed, OOM, node lost)
            with self.lock:
                if slot.ref is not ref:
                    return   # settled already (deadline)
                step = self._release(slot)
                self.stats.actor_deaths += 1
                self._died(slot)
                self._retry(step, f"the actor judging it died ({_first_line(exc)})")
            return
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            with self.lock:
                if slot.ref is not ref:
                    return
                step = self._release(slot)
                if _is_task_error(exc):
                    _resolve(step.future, error=cause)   # bad input: the caller's, not a verdict
                else:
                    self._retry(step, f"the judge raised {type(cause).__name__}: {_first_line(cause)}")
            return
        with self.lock:
            if slot.ref is not ref:
                return
            step = self._release(slot)
            if "judge_error" in value:
                self._retry(step, value["judge_error"])
            else:
                self.stats.judged += 1
                record = EvaluationRecord.from_dict(value)
                if step.judged is not None:   # before the future: a caller woken by it finds the record kept
                    try:
                        step.judged(record)
                    except Exception:
                        traceback.print_exc()
                _resolve(step.future, record)

    def _expire(self, now: float) -> None:
        """Steps past the pool's step timeout (retried) or their batch's deadline (settled as unjudged)."""
        for step in [s for s in self.queue if s.deadline is not None and now >= s.deadline]:
            self.queue.remove(step)
            self._settle(step, "it was still queued at its batch's deadline: every actor was busy")
        for slot in self.slots:
            step = slot.step
            if step is None:
                continue
            if step.deadline is not None and now >= step.deadline:
                self._kill(slot)
                self._settle(self._release(slot), "it was still running at its batch's deadline; its judge was "
                                                  "stopped (raise deadline_s above the config's step_budget_s so that "
                                                  "a hang is judged as the candidate's timeout)")
            elif now - slot.started > self.step_timeout_s:
                self._kill(slot)
                self._retry(self._release(slot), f"its judge did not answer within the pool's step timeout of "
                                                  f"{self.step_timeout_s:g} s")

    def _retry(self, step: Step, why: str) -> None:
        step.failures.append(why)
        if step.attempts < 2:
            self.stats.retried += 1
            self.queue.appendleft(step)
        else:
            self._settle(step, "; then ".join(step.failures) + " (tried twice)")

    def _settle(self, step: Step, why: str) -> None:
        self.stats.unjudged += 1
        _resolve(step.future, step.unjudged(why))

    def _release(self, slot: Slot) -> Step:
        step = slot.step
        slot.step, slot.ref = None, None
        return step

    def _kill(self, slot: Slot) -> None:
        """Kill the actor (and so its judge's processes); Ray restarts it."""
        ray = ray_module()
        self.stats.actors_killed += 1
        self._died(slot)
        try:
            ray.kill(slot.handle, no_restart=False)
        except Exception:
            pass

    def _died(self, slot: Slot) -> None:
        """Count a death; no step for it until it answers again; past Ray's restarts, a new actor in its bundle."""
        slot.deaths += 1
        if slot.deaths > self.max_restarts:
            self._replace(slot)
        else:
            slot.probe, slot.probe_after = None, time.monotonic() + 0.2

    def _replace(self, slot: Slot) -> None:
        ray = ray_module()
        try:
            ray.kill(slot.handle, no_restart=True)
        except Exception:
            pass
        slot.handle, slot.deaths = self.make_actor(slot.index), 0
        slot.probe, slot.probe_after = slot.handle.health.remote(), None
        self.stats.actors_replaced += 1


def _resolve(future: Future, value: Any = None, error: BaseException | None = None) -> None:
    """Settle `future` once (the front may have settled it at a deadline already)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except InvalidStateError:
        pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _is_task_error(exc: BaseException) -> bool:
    from pkb_env.task import TaskError

    cause = getattr(exc, "cause", None)
    return isinstance(cause, TaskError)
