"""The one client of the judge: every door (the Gymnasium env, the TRL reward, `evaluate`, the CLI, the OpenEnv
server, the trainer adapters) talks to the judge through a `JudgeClient` (docs/architecture.md, "The client").

    from pkb_env import JudgeConfig, LocalClient
    with LocalClient(JudgeConfig(executor="cpu", world_size=4)) as client:
        observation = client.observation("all_reduce")            # turn 0: the prompt, reference, topology
        record = client.submit("all_reduce", code).result()       # a Future of the EvaluationRecord
        records = client.map([("all_gather", a), ("broadcast", b)])

Two implementations share the protocol, as vLLM's engine clients share one interface whether the engine runs in
the caller's process or in others:

* `LocalClient`: one JudgeService in this process, on a thread of its own for its whole life. A service judges one
  step at a time (its timings must be the only work on its cores or GPUs), and its zygote dies with the thread that
  started it (PR_SET_PDEATHSIG follows the thread), so no caller's thread, which may end first, may start it.
  Callers may come from any thread or event loop; their steps queue in order of arrival. A step that parse and
  screen decide (unparsable, flagged) never starts a rank process.
* `pkb_env.pool.JudgePool`: JudgeServices on Ray actors, steps in parallel across them.

A failure of the judge itself (JudgeError: the reference died twice, required containment missing) becomes an
unjudged record (Verdict.JUDGE_ERROR, scored 0 and marked unjudged) here, in one place, so one bad step does not
end a training run: never the candidate's fault. Bad input (an unknown task, a size the task cannot take) raises
TaskError at `submit`, naming the fix. pkb_env/shared.py gives every caller of a process one client per config
(the trainer adapters make envs and reward calls by the thousand).
"""
from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from pkb_env.config import JudgeConfig
from pkb_env.errors import JudgeError
from pkb_env.executors.placement import ExecutorInfo
from pkb_env.judge_thread import JudgeThread
from pkb_env.lanes import Lanes
from pkb_env.record import EvaluationRecord
from pkb_env.service import JudgeService
from pkb_env.signals import signals_held
from pkb_env.task import TaskError, TaskSpec, load_task

T = TypeVar("T")
Future = concurrent.futures.Future


@runtime_checkable
class JudgeClient(Protocol):
    """What every door may ask of the judge, whatever runs it (the module docstring)."""

    config: JudgeConfig        # the config in force (a pool's, with `auto` resolved for its cluster)

    @property
    def info(self) -> ExecutorInfo:
        """The executor in words: name, hardware fingerprint, whether times mean anything, topology config."""

    def tasks(self, preset: str | None = None, dtype: str | None = None) -> list[str]:
        """The suite as it runs here: every task this judge can judge at `preset` and `dtype` (None: the config's)."""

    def problem(self, task: str, preset: str | None = None, dtype: str | None = None) -> str | None:
        """Why `task` cannot be judged here at that size, with the fix, or None (TaskError for an unknown task)."""

    def observation(self, task: str, preset: str | None = None, dtype: str | None = None, feedback: str = "",
                    turn: int = 0, ready: bool = False) -> dict[str, Any]:
        """What a model is shown of `task` at `turn` after `feedback` (the env's observation, pkb_env/spaces.py).
        `ready`: make the judge ready to judge `task` first (start its ranks, measure the machine where it is
        configured to), as an episode's first observation does; else nothing starts."""

    def submit(self, task: str, code: str, preset: str | None = None,
               dtype: str | None = None) -> Future:
        """Queue one step: a Future of its EvaluationRecord. TaskError here for a task that cannot be judged."""

    def map(self, batch: Sequence[tuple[str, str]], deadline_s: float | None = None) -> list[EvaluationRecord]:
        """Judge every (task, code) of `batch`; the records in order. `deadline_s`: steps unjudged by then are
        JUDGE_ERROR records."""

    def close(self) -> None:
        """Stop every process of the judge; a step in progress is stopped, queued ones are cancelled."""


def unjudged(spec: TaskSpec, config: JudgeConfig, info: ExecutorInfo, preset: str | None, dtype: str | None,
             why: str) -> EvaluationRecord:
    """The JUDGE_ERROR record of a step of `spec` at `preset` and `dtype` (None: the config's), saying why."""
    preset = preset or config.preset
    return EvaluationRecord.unjudged(spec.name, config.world_size, preset, spec.resolve_dtype(preset, dtype or config.dtype),
                                     info.name, info.hardware, why)


def check_batch(batch: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """`batch` as (task, code) pairs, or TypeError naming the bad item."""
    for item in batch:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"batch items must be (task, code) pairs, got {item!r:.80}")
    return [tuple(item) for item in batch]


def check_code(code: object) -> str:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str (a completion or bare code), got {type(code).__name__}")
    return code


def judge_step(service: JudgeService, spec: TaskSpec, code: str, preset: str | None = None,
               dtype: str | None = None) -> EvaluationRecord:
    """One step on `service`, on the thread that owns it: parse and screen alone first (a step they decide starts
    no rank), then the whole pipeline; a JudgeError becomes the unjudged record."""
    try:
        session = service.open(spec.name, preset, dtype, prestart=False)
        record = service.screen(session, code)
        if record is None:
            record = service.open(spec.name, preset, dtype).judge(code)
        return record
    except JudgeError as exc:
        return unjudged(spec, service.config, service.info, preset, dtype, str(exc))


class LocalClient:
    """The judge in this process, on a thread of its own (the module docstring).

    `progress`, `trace` and `recorder` are JudgeService's (pkb_env/service.py); they are called on the judge's
    thread. `run(fn)` calls `fn(service)` there, for what only a local judge has (calibration, isolation, its
    processes), so that no caller touches the service from its own thread.
    """

    def __init__(self, config: JudgeConfig | None = None, progress=None, trace=None, recorder=None):
        self.config = config or JudgeConfig()
        self._closed = False
        self._lanes: Lanes | None = None        # made by the first batch, with config.verify_lanes
        self._lanes_made = threading.Lock()
        self._thread = JudgeThread("pkb-judge")
        # made on the judge's thread: it starts nothing yet (the first `ready` observation or step does)
        self._service: JudgeService = self._thread.call(JudgeService, self.config, progress, trace,
                                                        recorder).result()

    # -- what it is --------------------------------------------------------------------------------
    @property
    def info(self) -> ExecutorInfo:
        return self._service.info

    @property
    def world_size(self) -> int:
        return self.config.world_size

    def tasks(self, preset: str | None = None, dtype: str | None = None) -> list[str]:
        return self._service.tasks(preset, dtype)    # the catalogue and the executor's placement: no process

    def problem(self, task: str, preset: str | None = None, dtype: str | None = None) -> str | None:
        return self._service.problem(load_task(task), preset, dtype)

    def observation(self, task: str, preset: str | None = None, dtype: str | None = None, feedback: str = "",
                    turn: int = 0, ready: bool = False) -> dict[str, Any]:
        from pkb_env import spaces

        self._check(task, preset, dtype)
        open_ = self._service.open
        return self._call(lambda: spaces.observation(open_(task, preset, dtype, prestart=ready), feedback, turn))

    def run(self, fn: Callable[[Any], T]) -> T:
        """`fn(service)` on the judge's thread, after the steps queued before it (the class docstring)."""
        return self._call(fn, self._service)

    # -- the door ------------------------------------------------------------------------------------
    def submit(self, task: str, code: str, preset: str | None = None, dtype: str | None = None) -> Future:
        spec = self._check(task, preset, dtype)
        check_code(code)
        self._live()
        return self._thread.call(judge_step, self._service, spec, code, preset, dtype)

    def judge(self, task: str, code: str, preset: str | None = None, dtype: str | None = None) -> EvaluationRecord:
        """One step, waited for: `submit(...).result()`."""
        return self.submit(task, code, preset, dtype).result()

    def map(self, batch: Sequence[tuple[str, str]], deadline_s: float | None = None) -> list[EvaluationRecord]:
        futures = self.submit_many(batch)
        done, late = concurrent.futures.wait(futures, timeout=deadline_s)
        if late:   # the deadline passed: what is still queued is cancelled, the step running is let finish
            for future in late:
                future.abandoned = True   # a batch's candidate found correct is not timed after this (Lanes)
                future.cancel()
        records = []
        for (task, _), future in zip(batch, futures):
            if future.cancelled() or not future.done():
                records.append(unjudged(load_task(task), self.config, self.info, None, None,
                                        f"the batch's deadline of {deadline_s:g} s passed before it was judged"))
            else:
                records.append(future.result())
        return records

    async def amap(self, batch: Sequence[tuple[str, str]], deadline_s: float | None = None) -> list[EvaluationRecord]:
        """`map` for an event loop: awaits the batch's records, in order, without blocking the loop."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, self.map, batch, deadline_s)

    def submit_many(self, batch: Sequence[tuple[str, str]]) -> list[Future]:
        """Queue every (task, code) of `batch`: a Future of each record, in order. With `config.verify_lanes`, the
        untimed work of the whole batch runs on the lanes at once and a record that is not correct is ready as
        soon as its lane decides it; the correct ones are timed here, one at a time, after every lane has finished
        (`Lanes`). Without lanes, one step after another, as `submit` does. TaskError or TypeError for a bad item,
        before anything is queued."""
        batch = check_batch(batch)
        items = [(self._check(task, None, None), check_code(code)) for task, code in batch]
        self._live()
        if not self.config.verify_lanes or not items:
            return [self._thread.call(judge_step, self._service, spec, code) for spec, code in items]
        with self._lanes_made:
            if self._lanes is None:
                self._lanes = Lanes(self.config, self.info, judge_step)
        return self._lanes.judge(items, self._thread, self._service)

    def _check(self, task: str, preset: str | None, dtype: str | None) -> TaskSpec:
        spec = load_task(task)   # TaskError naming the closest tasks
        problem = self._service.problem(spec, preset, dtype)
        if problem:
            raise TaskError(problem)
        return spec

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        self._live()
        return self._thread.call(fn, *args).result()

    def _live(self) -> None:
        if self._closed:
            raise RuntimeError("this judge client is closed; make a new one")

    # -- the end -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the judge: queued steps are cancelled, the step in progress is stopped (its processes killed),
        then every process ends and every file goes. Ctrl-C and SIGTERM arriving meanwhile are held until it is
        done (then raised as usual), so an impatient second Ctrl-C cannot leave half of it. Again: nothing."""
        if self._closed:
            return
        self._closed = True
        with signals_held():
            self._thread.cancel_queued()
            if self._thread.busy is not None:
                self._service.interrupt()        # the step in progress fails fast; its record is nobody's
            try:
                if self._lanes is not None:
                    self._lanes.close()
            finally:
                try:
                    self._thread.call(self._service.close).result()
                finally:
                    self._thread.stop()

    def __enter__(self) -> "LocalClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
