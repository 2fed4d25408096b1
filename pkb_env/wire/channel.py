"""Messages between the judge and rank processes: a JSON header, then optionally one binary payload.

The judge never unpickles anything a rank sends: a candidate can write to its own end of the channel
(forging results), so headers are JSON and tensor payloads are read with `torch.load(weights_only=True)`,
which admits only tensors and plain containers. Sizes are capped on receipt. Framing is all this module
does; what a rank may say in a frame is messages.py's business.
"""
from __future__ import annotations

import io
import json
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

MAX_HEADER_BYTES = 1 << 20


class ChannelClosed(EOFError):
    """The peer's end is gone (the process exited or was killed)."""


class ChannelTimeout(TimeoutError):
    """Nothing arrived before the deadline."""


class ChannelError(ValueError):
    """The peer sent something that is not a well-formed message."""


class ChannelStopped(Exception):
    """The waiter was told to stop waiting (`recv`'s `stopped`: its judge is closing)."""


STOP_POLL_S = 0.25   # how often a wait that may be stopped looks at its `stopped`


def send(conn: Connection, header: dict[str, Any], payload: bytes | None = None) -> None:
    header = {**header, "payload": payload is not None}
    conn.send_bytes(json.dumps(header).encode())
    if payload is not None:
        conn.send_bytes(payload)


def recv(conn: Connection, deadline: float | None = None, max_payload: int = 1 << 30,
         stopped: Callable[[], bool] | None = None) -> tuple[dict[str, Any], bytes | None]:
    """One message; raises ChannelTimeout past `deadline` (a time.monotonic() value), and ChannelStopped before
    the message starts where `stopped()` turns true (a peer's answer can be minutes away: a build)."""
    _wait(conn, deadline, stopped)
    header = _read(conn, MAX_HEADER_BYTES)
    try:
        message = json.loads(header, parse_constant=_no_constant)
    except ValueError as exc:
        raise ChannelError(f"malformed header: {exc}") from None
    if not isinstance(message, dict):
        raise ChannelError("header is not an object")
    payload = None
    if message.get("payload"):
        _wait(conn, deadline)
        payload = _read(conn, max_payload)
    return message, payload


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: no honest header carries them


def _wait(conn: Connection, deadline: float | None, stopped: Callable[[], bool] | None = None) -> None:
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if stopped is not None:
            timeout = STOP_POLL_S if timeout is None else min(timeout, STOP_POLL_S)
        try:
            ready = conn.poll(timeout)
        except (OSError, EOFError):
            raise ChannelClosed("channel closed") from None
        if ready:
            return
        if stopped is not None and stopped():
            raise ChannelStopped("stopped while waiting")
        if deadline is not None and time.monotonic() >= deadline:
            raise ChannelTimeout("no message before the deadline")


def _read(conn: Connection, limit: int) -> bytes:
    try:
        return conn.recv_bytes(limit)
    except (EOFError, ConnectionError):  # a peer that died mid-frame resets the connection: it is gone
        raise ChannelClosed("channel closed") from None
    except OSError as exc:  # "bad message length" for oversize messages
        raise ChannelError(f"unreadable message: {exc}") from None


def pack_tensors(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def unpack_tensors(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
