"""The pool's Ray actors: `JudgeActor` owns one JudgeService, `EnvActor` one ParallelKernelEnv (a VectorEnv's sub-env).

Both are async actors, so that their event loop answers `health()` while a step runs. Every blocking call
runs on the actor's one worker thread, for the actor's whole life: a service judges one step at a time (its
timings must be the only work on its devices), and its zygote dies with the thread that started it
(PR_SET_PDEATHSIG follows the thread), so that thread must live as long as the judge does. Killing the actor
process (the pool's answer to a step that outran its deadline) takes the zygote, the cells and every rank
with it.

Answers are plain data: a record crosses as `record.to_dict()`; a failure of the judge itself (JudgeError,
or anything unexpected) comes back as {"judge_error": why}, never as the candidate's verdict. A TaskError
(bad input the driver could not see) is raised, for the caller.
"""
from __future__ import annotations

import asyncio
import os
import socket
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from pkb_env.config import JudgeConfig
from pkb_env.task import TaskError


class _Worker:
    """The one thread that makes, uses and closes the actor's judge; started with the actor."""

    def __init__(self, make: Callable[[], Any]):
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pkb-judge")
        self.made = self.pool.submit(make)  # a restarted actor starts its ranks at once, before a step asks

    async def run(self, fn: Callable, *args) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)


class _Actor:
    """What both actors share: the worker thread, the step in progress, the health answer."""

    def __init__(self, make: Callable[[], Any]):
        self.started_at = time.time()
        self.steps = 0
        self.busy: tuple[str, float] | None = None   # (what, since)
        self.worker = _Worker(make)

    async def start(self) -> dict[str, Any]:
        """Wait until the judge is made and its processes started (raises what making it raised)."""
        await asyncio.wrap_future(self.worker.made)
        return await self.health()

    async def health(self) -> dict[str, Any]:
        import psutil

        me = psutil.Process()
        try:
            children = [p.pid for p in me.children(recursive=True)]
        except psutil.Error:
            children = []
        busy_s = time.time() - self.busy[1] if self.busy else None
        return {"pid": os.getpid(), "host": socket.gethostname(), "node": _node_id(), "steps": self.steps,
                "busy": self.busy[0] if self.busy else None, "busy_s": busy_s, "processes": [os.getpid(), *children],
                "up_s": time.time() - self.started_at, **self._describe()}

    async def _call(self, what: str, fn: Callable, *args) -> Any:
        self.busy = (what, time.time())
        try:
            return await self.worker.run(fn, *args)
        finally:
            self.busy = None
            self.steps += 1

    async def shutdown(self) -> None:
        """Stop the judge's processes (after the step in progress, if any)."""
        await self.worker.run(self._discard)

    def _discard(self) -> None:
        raise NotImplementedError

    def _describe(self) -> dict[str, Any]:
        return {}


class JudgeActor(_Actor):
    """One JudgeService in a Ray actor (pkb_env/pool/pool.py drives it)."""

    def __init__(self, config: JudgeConfig):
        self.config = config
        self.service = None
        super().__init__(self._make)

    def _make(self) -> None:
        from pkb_env.service import JudgeService

        self.service = JudgeService(self.config)
        self.service.prestart()

    async def judge(self, task: str, code: str, preset: str | None, dtype: str | None) -> dict[str, Any]:
        return await self._call(task, self._judge, task, code, preset, dtype)

    def _judge(self, task: str, code: str, preset: str | None, dtype: str | None) -> dict[str, Any]:
        try:
            if self.service is None:
                self._make()
            return self.service.judge(task, code, preset, dtype).to_dict()
        except TaskError:
            raise
        except Exception as exc:  # JudgeError, or the judge's own bug: never the candidate's verdict
            traceback.print_exc()
            self._discard()          # a fresh judge for the next step
            return {"judge_error": f"{type(exc).__name__}: {exc}"}

    async def observation(self, task: str, preset: str | None, dtype: str | None) -> dict[str, Any]:
        """What a model is shown at turn 0 of `task` here (the env's observation), starting nothing."""
        return await self.worker.run(self._observation, task, preset, dtype)

    def _observation(self, task: str, preset: str | None, dtype: str | None) -> dict[str, Any]:
        from pkb_env import spaces

        if self.service is None:
            self._make()
        return spaces.observation(self.service.open(task, preset, dtype, prestart=False))

    def _discard(self) -> None:
        service, self.service = self.service, None
        if service is not None:
            service.close()

    def _describe(self) -> dict[str, Any]:
        service = self.service
        if service is None:
            return {}
        info = service.info
        return {"executor": info.name, "hardware": info.hardware, "performance_available": info.performance_available,
                "topology": info.topology}


class EnvActor(_Actor):
    """One ParallelKernelEnv in a Ray actor: a sub-env of pkb_env/pool/vector.py's RayVectorEnv."""

    def __init__(self, env_kwargs: dict[str, Any]):
        self.env_kwargs = env_kwargs
        self.env = None
        super().__init__(self._make)

    def _make(self) -> None:
        from pkb_env.env import ParallelKernelEnv

        self.env = ParallelKernelEnv(**self.env_kwargs)
        self.env.judge.prestart()

    async def reset(self, seed: int | None, options: dict | None) -> tuple[dict, dict]:
        return await self._call("reset", self._reset, seed, options)

    def _reset(self, seed: int | None, options: dict | None) -> tuple[dict, dict]:
        if self.env is None:
            self._make()
        return self.env.reset(seed=seed, options=options)

    async def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        return await self._call("step", self._step, action)

    def _step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["record"] = info["record"].to_dict()   # plain data across the wire
        return obs, reward, terminated, truncated, info

    def _discard(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:
        return None
