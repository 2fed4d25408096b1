"""The rank's line to the judge for services (kernel compiles). Unset outside a judged rank process.

The connection lives only inside the `request` closure made by `attach`, not in a module attribute
(candidates import this package; the static screen rejects reaching into closures).
"""
from __future__ import annotations

from multiprocessing.connection import Connection

from pkb_env.executors import channel


def request(kind: str, body: dict) -> tuple[dict, bytes | None]:
    raise RuntimeError("not inside a judged rank: no judge to ask")


def attach(conn: Connection) -> None:
    global request, _attached
    send, recv = channel.send, channel.recv

    def request(kind: str, body: dict) -> tuple[dict, bytes | None]:
        """Ask the judge; block until it answers (the judge's own time does not count against the step)."""
        send(conn, {"event": "request", "kind": kind, **body})
        return recv(conn)

    _attached = True


_attached = False


def attached() -> bool:
    return _attached
