"""How the package's processes take SIGINT and SIGTERM: a close that no second Ctrl-C can cut in half, and a
SIGTERM that unwinds like Ctrl-C (so that `finally` blocks stop the rank processes) in the programs a person runs
(`pkb-env`, `pkb-env serve`)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that `finally` blocks (the judge's close) run before the exit.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


@contextmanager
def sigterm_raises():
    """SIGTERM raises Terminated for the block (main thread, and only where nobody else set a handler)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM for the block: note them, then hand them to the previous handlers afterwards.

    Python runs signal handlers in the main thread whichever thread the kernel picked, so blocking the
    signals in this thread would not hold them; swapping the handlers does. Off the main thread (where
    handlers cannot be set) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous = {sig: handler for sig, handler in previous.items() if handler is not None}  # None: set outside Python
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)
