"""One judge client per config for every caller of a process: the trainer adapters make envs and reward calls by
the thousand (a reward call per sample, an env per trajectory, often from several threads), while a client owns
rank processes that take seconds to start. `shared_client(config)` makes a LocalClient at the first call, or with
a Ray `address` a JudgePool there; everything made here is closed at the interpreter's exit (or `close_shared`).
"""
from __future__ import annotations

import atexit
import threading

from pkb_env.client import JudgeClient, LocalClient
from pkb_env.config import JudgeConfig

_clients: dict[tuple, JudgeClient] = {}
_guard = threading.Lock()


def shared_client(config: JudgeConfig, address: str | None = None, actors: int | None = None) -> JudgeClient:
    """This process's client for `config`, made at the first call: a LocalClient, or with a Ray `address` a
    JudgePool there (`actors` of them: docs/scale_out.md). Closed at the interpreter's exit (or `close_shared`)."""
    key = (config, address, actors)
    with _guard:
        if key not in _clients:
            if address:
                from pkb_env.pool import JudgePool

                _clients[key] = JudgePool(config, address=address, actors=actors)
            else:
                _clients[key] = LocalClient(config)
        return _clients[key]


def close_shared() -> None:
    """Close every client `shared_client` made (their rank processes and actors stop)."""
    with _guard:
        made = list(_clients.values())
        _clients.clear()
    for client in made:
        client.close()


atexit.register(close_shared)
