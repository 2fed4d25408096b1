"""The thread a judge lives on: every call on a JudgeService runs on the one thread that made it (its zygote dies
with the thread that started it: PR_SET_PDEATHSIG follows the thread), in order of arrival (pkb_env/client.py)."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class JudgeThread:
    """One daemon thread that runs every call on the judge, in order, for the judge's whole life.

    Daemon, so that an interpreter leaving without closing does not wait for it (the executor's finalizer
    stops the processes then); its own queue rather than a ThreadPoolExecutor's, whose workers are joined and
    stopped before `atexit` runs, when the shared clients are closed."""

    def __init__(self, name: str):
        self._queue: queue.Queue = queue.Queue()
        self.busy: Future | None = None          # the call running now
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., T], *args: Any) -> Future:
        future: Future = Future()
        self._queue.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if future is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            self.busy = future
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001  (handed to the caller through the future)
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self.busy = None

    def cancel_queued(self) -> None:
        while True:
            try:
                future, _, _ = self._queue.get_nowait()
            except queue.Empty:
                return
            if future is not None:
                future.cancel()

    def stop(self) -> None:
        self._queue.put((None, None, None))
        if threading.current_thread() is not self._thread:
            self._thread.join()
