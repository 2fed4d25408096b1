"""The pool's Ray actor: `JudgeActor` owns one LocalClient (pkb_env/client.py), its judge on a thread of its own.

An async actor, so that its event loop answers `health()` while a step runs on the client's thread. Killing the
actor process (the pool's answer to a step that outran its deadline) takes the zygote, the cells and every rank
with it.

Answers are plain data: a record crosses as `record.to_dict()` (a JudgeError already made an unjudged record of
it, in the client); anything unexpected from the judge comes back as {"judge_error": why}, never as the
candidate's verdict, and the actor makes a fresh client for the next step. A TaskError (bad input the driver
could not see) is raised, for the caller.
"""
from __future__ import annotations

import asyncio
import os
import socket
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pkb_env.config import JudgeConfig
from pkb_env.task import TaskError


class JudgeActor:
    """One LocalClient in a Ray actor (pkb_env/pool/pool.py drives it)."""

    def __init__(self, config: JudgeConfig):
        self.config = config
        self.started_at = time.time()
        self.steps = 0
        self.busy: tuple[str, float] | None = None   # (task, since)
        self.client = None
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pkb-make")   # the event loop stays free
        self._made = self._maker.submit(self._make)   # a restarted actor starts its judge at once, before a step asks

    def _make(self) -> None:
        from pkb_env.client import LocalClient

        client = LocalClient(self.config)
        client.run(lambda service: service.prestart())
        self.client = client

    async def start(self) -> dict[str, Any]:
        """Wait until the judge is made and its processes started (raises what making it raised)."""
        await asyncio.wrap_future(self._made)
        return await self.health()

    async def _ready(self) -> None:
        """Wait for the judge being made, or make one where there is none (discarded, or its making failed).

        One make at a time: a step that came while the judge of a restarted actor was still starting once made
        a second judge here, and the first one's processes and directory were left to the actor's death (the
        next Ray kill left its /tmp/pkb-env-* folder) while the step waited for two starts."""
        if self.client is None and self._made.done():
            self._made = self._maker.submit(self._make)
        await asyncio.wrap_future(self._made)

    async def judge(self, task: str, code: str, preset: str | None, dtype: str | None) -> dict[str, Any]:
        self.busy = (task, time.time())
        try:
            await self._ready()
            return (await asyncio.wrap_future(self.client.submit(task, code, preset, dtype))).to_dict()
        except TaskError:
            raise
        except Exception as exc:  # the judge's own bug: never the candidate's verdict
            traceback.print_exc()
            await asyncio.wrap_future(self._maker.submit(self._discard))    # a fresh judge for the next step
            return {"judge_error": f"{type(exc).__name__}: {exc}"}
        finally:
            self.busy = None
            self.steps += 1

    async def observation(self, task: str, preset: str | None, dtype: str | None, feedback: str = "",
                          turn: int = 0) -> dict[str, Any]:
        """What a model is shown of `task` here (the env's observation), starting nothing."""
        await self._ready()
        return await asyncio.to_thread(self.client.observation, task, preset, dtype, feedback, turn)

    async def health(self) -> dict[str, Any]:
        import psutil

        try:
            children = [p.pid for p in psutil.Process().children(recursive=True)]
        except psutil.Error:
            children = []
        busy_s = time.time() - self.busy[1] if self.busy else None
        info = self.client.info if self.client is not None else None
        described = {} if info is None else {"executor": info.name, "hardware": info.hardware,
                                             "performance_available": info.performance_available,
                                             "topology": info.topology}
        return {"pid": os.getpid(), "host": socket.gethostname(), "node": _node_id(), "steps": self.steps,
                "starting": not self._made.done(),
                "busy": self.busy[0] if self.busy else None, "busy_s": busy_s, "processes": [os.getpid(), *children],
                "up_s": time.time() - self.started_at, **described}

    async def shutdown(self) -> None:
        """Stop the judge's processes (the step in progress, if any, is stopped)."""
        await asyncio.wrap_future(self._maker.submit(self._discard))

    def _discard(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:
        return None
