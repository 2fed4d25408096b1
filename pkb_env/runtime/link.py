"""The rank's line to the judge for services (kernel compiles). Unset outside a judged rank process."""
from __future__ import annotations

from multiprocessing.connection import Connection

from pkb_env.executors import channel

_conn: Connection | None = None


def attach(conn: Connection) -> None:
    global _conn
    _conn = conn


def attached() -> bool:
    return _conn is not None


def request(kind: str, body: dict) -> tuple[dict, bytes | None]:
    """Ask the judge; block until it answers (the judge's own time does not count against the step)."""
    channel.send(_conn, {"event": "request", "kind": kind, **body})
    return channel.recv(_conn)
