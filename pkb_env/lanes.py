"""Verify together, time alone: a batch's untimed work on lanes of verdicts-only judges, its timing on one judge.

An RL batch is mostly not fast code: early in training most completions are wrong, crash or do not build, yet one
judge takes them one step at a time, each waiting for the machine that only timing needs to itself. With
`JudgeConfig.verify_lanes = N`, a `LocalClient`'s batch (`map`, `amap`, `submit_many`) goes in two phases:

1. every candidate's parse, screen, build, trials and check run on N judges of verdicts only (`timing=False`),
   each on a thread of its own, taking the batch's candidates in order as they come free; a candidate that is not
   correct is decided there, and its Future resolves at once;
2. once every lane has finished, the client's own judge records what the lanes decided (its recorder, in order)
   and takes the correct candidates one at a time for a whole step, timed: nothing else of the batch runs while
   one is timed (the lanes' spares, started at the end of their last steps, are held mid-start meanwhile:
   `JudgeService.hold`). That step runs the trials again, on fresh secret inputs; its record is the one returned.

A correct candidate costs its untimed work twice; what is gained is that the wrong majority is judged N at a time
and never waits for a timed step (benchmarks/throughput.py --lanes; docs/scale_out.md, "Verify together, time
alone"). Where the client's judge times nothing (emulated ranks, `timing=False`), the lanes' records are final.
Lanes use the client's executor with their ranks unpinned (pinning is for timing), emulated ranks where the client
has GPUs; each is a judge of its own (a zygote, reference ranks, spares), started by the first batch.
"""
from __future__ import annotations

import concurrent.futures
import queue
from concurrent.futures import Future
from typing import Callable, Sequence

from pkb_env.config import JudgeConfig
from pkb_env.executors.placement import ExecutorInfo
from pkb_env.judge_thread import JudgeThread
from pkb_env.record import EvaluationRecord
from pkb_env.service import JudgeService
from pkb_env.task import TaskSpec

Step = Callable[[JudgeService, TaskSpec, str], EvaluationRecord]
ABANDONED = "the batch's deadline passed before this candidate was timed"


class Lanes:
    def __init__(self, config: JudgeConfig, info: ExecutorInfo, step: Step):
        """`config.verify_lanes` judges like the client's (`config`, placed as `info` says) giving verdicts only;
        `step(service, spec, code)` judges one candidate on a service, on the thread that owns it."""
        self.config = config.replace(timing=False, verify_lanes=0, pin_ranks=False,
                                     executor="cuda-emulated" if info.name == "cuda" else info.name)
        self.timed = config.timing and info.performance_available   # phase 2 happens
        self.available = info.performance_available
        self.step = step
        self._lanes: list[tuple[JudgeThread, JudgeService]] = []
        try:
            for k in range(config.verify_lanes):
                thread = JudgeThread(f"pkb-lane-{k}")
                self._lanes.append((thread, thread.call(JudgeService, self.config).result()))
        except BaseException:
            self.close()
            raise

    @property
    def services(self) -> list[JudgeService]:
        """The lanes' judges (for tests and diagnostics)."""
        return [lane for _, lane in self._lanes]

    def judge(self, items: Sequence[tuple[TaskSpec, str]], main: JudgeThread,
              service: JudgeService) -> list[Future]:
        """A Future of each item's record, in order (the module docstring); `main` is the thread of `service`, the
        client's judge."""
        results = [Future() for _ in items]
        work: queue.SimpleQueue = queue.SimpleQueue()
        for index in range(len(items)):
            work.put(index)
        decided: list[tuple[int, EvaluationRecord]] = []   # list.append is atomic: lanes append at once
        correct: list[int] = []

        def drain(lane: JudgeService) -> None:
            """On a lane's thread: take the batch's next candidate until none is left."""
            while True:
                try:
                    index = work.get_nowait()
                except queue.Empty:
                    return
                future = results[index]
                if getattr(future, "abandoned", False) or not future.set_running_or_notify_cancel():
                    continue
                spec, code = items[index]
                try:
                    record = self.step(lane, spec, code)
                except BaseException as exc:  # noqa: BLE001  (the caller's, through its Future)
                    future.set_exception(exc)
                    continue
                if record.correct and self.timed:
                    correct.append(index)
                    continue
                if not record.correct:   # never timed, wherever it ran: what the client's judge would have said
                    record.performance_available = self.available
                decided.append((index, record))
                future.set_result(record)

        lanes = [thread.call(drain, lane) for thread, lane in self._lanes]

        def finish() -> None:
            """On the client's thread, once every lane is done: record the lanes' verdicts, then time the correct."""
            concurrent.futures.wait(lanes)
            if service.recorder is not None:
                for index, record in sorted(decided, key=lambda pair: pair[0]):
                    service.record(items[index][0].name, items[index][1], record)
            if not correct:
                return
            # Each lane started a spare at the end of its last step: held (stopped mid-start) while the client's
            # judge times, as that judge holds its own, so that no rank of the batch imports or starts beside a burst.
            concurrent.futures.wait([thread.call(lane.hold) for thread, lane in self._lanes])
            try:
                for index in sorted(correct):
                    future, (spec, code) = results[index], items[index]
                    if getattr(future, "abandoned", False):
                        future.set_exception(TimeoutError(ABANDONED))
                        continue
                    try:
                        future.set_result(self.step(service, spec, code))
                    except BaseException as exc:  # noqa: BLE001
                        future.set_exception(exc)
            finally:
                for thread, lane in self._lanes:
                    thread.call(lane.release)

        main.call(finish)
        return results

    def close(self) -> None:
        """Stop every lane: queued work cancelled, a step in progress interrupted, every process and file gone."""
        for thread, lane in self._lanes:
            thread.cancel_queued()
            if thread.busy is not None:
                lane.interrupt()
        for thread, lane in self._lanes:
            try:
                thread.call(lane.close).result()
            finally:
                thread.stop()
        self._lanes = []
