"""The rank's line to the judge for services (kernel compiles). Unset outside a judged rank process.

The rank server attaches a function that sends one request header on its channel and returns the
judge's answer; this module never sees the channel itself (nor imports the executors), and keeps the
function only inside the `request` closure, not in a module attribute (candidates import this package;
the static screen rejects reaching into closures). Requests are wire/services.py's, checked when made.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pkb_env.wire.services import BuildRequest

Answer = tuple[dict, "bytes | None"]


def request(service: BuildRequest) -> Answer:
    raise RuntimeError("not inside a judged rank: no judge to ask")


def attach(ask: Callable[[dict], Answer]) -> None:
    """Route `request` through `ask(header) -> (reply header, payload)` (the rank server's channel)."""
    global request, _attached

    def request(service: BuildRequest) -> Answer:
        """Ask the judge; block until it answers (the judge's own time does not count against the step)."""
        return ask({"event": "request", **service.message()})

    _attached = True


_attached = False


def attached() -> bool:
    return _attached
