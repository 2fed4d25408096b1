"""`JudgePool`: judges on a Ray cluster, one LocalClient per actor, fed asynchronously with bounded waits.

    from pkb_env import JudgeConfig
    from pkb_env.pool import JudgePool
    with JudgePool(JudgeConfig(executor="cuda", world_size=2), address="auto") as pool:
        futures = [pool.submit(task, code) for task, code in batch]      # at once (waits only for queue room)
        for record in pool.as_completed(futures, deadline_s=600): ...    # EvaluationRecords as they finish
        records = pool.map(batch, deadline_s=600)                        # in order: what local judging gives

The pool is a JudgeClient (pkb_env/client.py: every door can judge on it as on a local judge): every actor
holds one LocalClient made from the same JudgeConfig, and records cross as JSON. Placement: pkb_env/pool/placement.py; faults,
deadlines and retries: pkb_env/pool/dispatch.py; the cluster: pkb_env/pool/cluster.py; docs/scale_out.md.
A record whose verdict is JUDGE_ERROR is a step the pool could not judge (its reason in `error`): never
the candidate's fault; the rewards score it 0 with `scored: no`, and trainers drop it.
"""
from __future__ import annotations

import concurrent.futures
import time
from typing import Any, Iterable, Iterator, Sequence

from pkb_env.client import check_batch, check_code, unjudged
from pkb_env.config import JudgeConfig
from pkb_env.executors.placement import ExecutorInfo
from pkb_env.pool.actors import JudgeActor
from pkb_env.pool.cluster import PoolError, ray_module
from pkb_env.pool.dispatch import Dispatcher, Slot, Step
from pkb_env.pool.fleet import Fleet, step_timeout
from pkb_env.record import EvaluationRecord
from pkb_env.task import TaskError, load_task, runnable_tasks, size_problem

GRACE_S = 10.0   # past a batch's deadline, what as_completed allows the dispatcher to settle its steps


class JudgePool:
    """A pool of judge actors (the module docstring).

    address: "auto" | "local" | "ray://HOST:PORT" | "HOST:PORT" (pkb_env/pool/cluster.py).
    actors: how many (None: as many as the cluster's resources hold, pkb_env/pool/placement.py).
    cpus_per_actor: CPUs each actor claims (None: the world size for `cpu`, 1 for GPU executors).
    step_timeout_s: how long one try of a step may take before its actor is killed and the step retried
      (None: the config's step budget plus its start and timing timeouts, the most an honest step takes).
    queue_limit: steps queued beyond those in flight before `submit` waits (None: 4 per actor).
    max_restarts: Ray restarts of an actor before the pool replaces it with a new one.
    start_timeout_s: for the placement group and every actor's judge to start.
    recorder: given every judged record on this driver as it arrives, as `recorder.record(record, code, None,
      config=, topology=)` (pkb_env.data.EpisodeRecorder: a dataset row each, docs/data.md); the pool sees no
      prompt, so callers that know the chat (evaluate) record themselves instead. JUDGE_ERROR records say
      nothing of the code and are not recorded.
    Where it cannot start (no cluster, one too small, a judge that cannot start there), PoolError says why.
    """

    def __init__(self, config: JudgeConfig | None = None, address: str = "auto", actors: int | None = None,
                 cpus_per_actor: float | None = None, step_timeout_s: float | None = None,
                 queue_limit: int | None = None, max_restarts: int = 3, start_timeout_s: float = 300.0,
                 recorder=None):
        config = config or JudgeConfig()
        self.recorder = recorder
        if not isinstance(config, JudgeConfig):
            raise TypeError(f"config must be a JudgeConfig (JudgeConfig.from_mapping for plain data), got "
                            f"{type(config).__name__}")
        if queue_limit is not None and (isinstance(queue_limit, bool) or not isinstance(queue_limit, int)
                                        or queue_limit < 1):
            raise ValueError(f"queue_limit must be a positive integer or None (4 per actor), got {queue_limit!r}")
        self.step_timeout_s = step_timeout(config, step_timeout_s)
        self._closed = False
        self._steps: dict[concurrent.futures.Future, Step] = {}
        self._dispatcher: Dispatcher | None = None
        self._fleet = Fleet(config, address, actors, cpus_per_actor, max_restarts, start_timeout_s)
        self.config = self._fleet.config       # `auto` resolved for the cluster: what every actor runs
        try:
            self._fleet.start(JudgeActor, lambda index: (self.config,))
            slots = [Slot(i, handle) for i, handle in enumerate(self._fleet.handles)]
            self._dispatcher = Dispatcher(slots, self._replace, self.step_timeout_s,
                                          queue_limit or 4 * len(slots), max_restarts)
        except BaseException:
            self.close()
            raise

    def _replace(self, index: int):
        handle = self._fleet.make(index)
        self._fleet.handles[index] = handle
        return handle

    # -- what it is --------------------------------------------------------------------------------
    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, one per slot (a replaced actor's slot holds the new handle)."""
        self._live()
        return list(self._fleet.handles)

    @property
    def shape(self):
        """One actor's resources and the executor it runs (pkb_env/pool/placement.py's ActorShape)."""
        return self._fleet.shape

    @property
    def size(self) -> int:
        return len(self.actors)

    @property
    def started(self) -> list[dict[str, Any]]:
        """What each actor said of itself when its judge had started (pid, host, executor, hardware)."""
        return self._fleet.started

    def stats(self) -> dict[str, int]:
        """Steps submitted, judged, retried and unjudged; actor deaths, kills and replacements; queue and busy now."""
        dispatcher = self._live()
        return {**vars(dispatcher.stats), "queued": dispatcher.queued(), "busy": dispatcher.busy()}

    def health(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Each actor's answer (pid, host, node, the task it is judging and for how long, steps, processes), or
        {"alive": False, "error": ...} for one that did not answer within `timeout_s`."""
        self._live()
        return self._fleet.health(timeout_s)

    def process_ids(self) -> dict[str, list[int]]:
        """The live processes of every actor (the actor's own and its judge's), by host: for leak checks."""
        self._live()
        return self._fleet.process_ids()

    @property
    def info(self) -> ExecutorInfo:
        """The executor the actors run, as the first of them described it when it had started."""
        first = self.started[0] if self.started else {}
        return ExecutorInfo(first.get("executor", self.config.executor), first.get("hardware", "unknown"),
                            bool(first.get("performance_available", False)), first.get("topology", "unknown"))

    def tasks(self, preset: str | None = None, dtype: str | None = None) -> list[str]:
        """The suite as the pool's judges run it at `preset` and `dtype` (None: the config's)."""
        config = self.config
        return runnable_tasks(config.world_size, preset or config.preset, dtype or config.dtype,
                              config.executor != "cuda")

    def problem(self, task: str, preset: str | None = None, dtype: str | None = None) -> str | None:
        """Why `task` cannot be judged on the pool at that size, with the fix, or None."""
        config = self.config
        return size_problem(load_task(task), config.world_size, preset or config.preset, dtype or config.dtype,
                            config.executor != "cuda")

    def observation(self, task: str, preset: str | None = None, dtype: str | None = None, feedback: str = "",
                    turn: int = 0, ready: bool = False) -> dict[str, Any]:
        """The env's observation of `task` at `turn` after `feedback` as the pool's judges see it (their hardware
        and topology), from the first actor that answers (one restarting is skipped) within the pool's step
        timeout. `ready` asks nothing more: every actor started its judge when it started."""
        self._check(task, preset, dtype)
        ray = ray_module()
        end = time.monotonic() + self.step_timeout_s
        while True:
            for handle in self.actors:
                try:
                    return ray.get(handle.observation.remote(task, preset, dtype, feedback, turn),
                                   timeout=max(0.1, end - time.monotonic()))
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    continue
            if time.monotonic() > end:
                raise PoolError(f"no actor of the pool answered within {self.step_timeout_s:g} s; see pool.health()")
            time.sleep(0.5)

    # -- the door ------------------------------------------------------------------------------------
    def submit(self, task: str, code: str, preset: str | None = None, dtype: str | None = None,
               timeout_s: float | None = None) -> concurrent.futures.Future:
        """Queue one step; a Future of its EvaluationRecord. Returns at once unless `queue_limit` steps already
        wait: then it waits for room up to `timeout_s` (None: the pool's step timeout, within which every busy
        actor frees), then TimeoutError. Bad input (unknown task, a size the task cannot take) raises here."""
        dispatcher = self._live()
        spec = self._check(task, preset, dtype)
        check_code(code)
        step = Step(task, code, preset, dtype, concurrent.futures.Future(), self._unjudged(spec, preset, dtype))
        if self.recorder is not None:
            step.judged = lambda record: self._record(record, code)
        wait = self.step_timeout_s if timeout_s is None else timeout_s
        if not dispatcher.enqueue(step, wait):
            if self._closed:
                raise PoolError("the pool is closed")
            raise TimeoutError(f"the pool stayed full for {wait:g} s ({self.size} actor(s) busy, "
                               f"{dispatcher.queued()} step(s) queued); wait on the futures you hold, or raise "
                               f"queue_limit")
        self._steps[step.future] = step
        step.future.add_done_callback(lambda done: self._steps.pop(done, None))   # a settled step needs no deadline
        return step.future

    def _record(self, record: EvaluationRecord, code: str) -> None:
        topology = self.started[0].get("topology") if self.started else None
        self.recorder.record(record, code, None, config=self.config, topology=topology)

    def as_completed(self, futures: Iterable[concurrent.futures.Future],
                     deadline_s: float | None = None) -> Iterator[EvaluationRecord]:
        """The records of `futures` as they finish. With `deadline_s`, every step unjudged by then (queued or
        running) is settled as JUDGE_ERROR, its judge stopped, so this returns within the deadline and a few
        seconds. The futures themselves carry the same records (`future.result()`)."""
        futures = list(futures)
        unknown = [f for f in futures if not isinstance(f, concurrent.futures.Future)
                   or (f not in self._steps and not f.done())]
        if unknown:
            raise ValueError(f"{len(unknown)} of the futures were not submitted to this pool")
        wait = None
        if deadline_s is not None:
            if isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float)) or deadline_s <= 0:
                raise ValueError(f"deadline_s must be a positive number of seconds or None, got {deadline_s!r}")
            self._live().set_deadline([self._steps[f] for f in futures if f in self._steps],
                                      time.monotonic() + deadline_s)
            wait = deadline_s + GRACE_S
        try:
            for future in concurrent.futures.as_completed(futures, timeout=wait):
                yield future.result()
        except concurrent.futures.TimeoutError:   # the dispatcher should have settled them: do it here
            for future in futures:
                step = self._steps.get(future)
                if step is not None and not future.done():
                    try:
                        future.set_result(step.unjudged(f"not settled within {wait:g} s"))
                    except concurrent.futures.InvalidStateError:
                        pass   # the dispatcher settled it meanwhile
                    yield future.result()

    def map(self, batch: Sequence[tuple[str, str]], deadline_s: float | None = None) -> list[EvaluationRecord]:
        """Judge every (task, code) of `batch`; the records in order (the same verdicts local judging gives)."""
        start = time.monotonic()
        futures = []
        for item in check_batch(batch):
            left = None if deadline_s is None else max(0.0, deadline_s - (time.monotonic() - start))
            try:
                futures.append(self.submit(item[0], item[1], timeout_s=left))
            except TimeoutError:   # the deadline passed while waiting for room: the rest are not judged
                future = concurrent.futures.Future()
                why = "the batch's deadline passed before it was queued"
                future.set_result(self._unjudged(load_task(item[0]), None, None)(why))
                futures.append(future)
        left = None if deadline_s is None else max(0.001, deadline_s - (time.monotonic() - start))
        for _ in self.as_completed(futures, left):
            pass
        return [f.result() for f in futures]

    # -- helpers -------------------------------------------------------------------------------------
    def _check(self, task: str, preset: str | None, dtype: str | None):
        problem = self.problem(task, preset, dtype)   # TaskError naming the closest tasks
        if problem:
            raise TaskError(problem)
        return load_task(task)

    def _unjudged(self, spec, preset: str | None, dtype: str | None):
        """The JUDGE_ERROR record of a step of `spec` at `preset` and `dtype` (None: the config's), given why."""
        return lambda why: unjudged(spec, self.config, self.info, preset, dtype,
                                    f"the pool could not judge this step: {why}")

    def _live(self) -> Dispatcher:
        if self._closed or self._dispatcher is None:
            raise PoolError("the pool is closed; make a new JudgePool")
        return self._dispatcher

    # -- the end -------------------------------------------------------------------------------------
    def close(self, timeout_s: float = 30.0) -> None:
        """Settle what is left as JUDGE_ERROR, stop every actor (their judges close their processes), free the
        placement group, and stop the cluster if the pool started it. No process of the pool is left."""
        if self._closed:
            return
        self._closed = True
        if self._dispatcher is not None:
            for step in self._dispatcher.close():
                try:
                    step.future.set_result(step.unjudged("the pool was closed before it was judged"))
                except concurrent.futures.InvalidStateError:
                    pass
        if getattr(self, "_fleet", None) is not None:
            self._fleet.close(timeout_s)

    def __enter__(self) -> "JudgePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
