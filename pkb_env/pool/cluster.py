"""The Ray cluster a pool runs on: one already running, joined; or a local one started for the pool's lifetime.

`address` (docs/scale_out.md):
- "auto": the cluster that `ray start --head` started on this machine (or the one RAY_ADDRESS names);
- "local": a cluster started in this process for the pool alone, stopped when the pool closes;
- "ray://host:10001": Ray Client; "host:6379": that cluster's GCS.
A process that is already connected (a trainer that called `ray.init`, as verl, SkyRL and OpenRLHF do) is
used as it is, whatever `address` says, and left connected at close.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from pkb_env.errors import PoolError
from pkb_env.extras import require

__all__ = ["Connection", "PoolError", "connect", "ray_module"]


def ray_module():
    """Ray, or MissingExtra naming `pip install 'pkb-env[ray]'`."""
    return require("ray", "ray", "the Ray judge pool (pkb_env.pool)")


@dataclass
class Connection:
    """How this pool reached Ray, and so what `close` must undo: a cluster it started is stopped."""

    address: str
    started: bool

    def close(self) -> None:
        if self.started:
            ray_module().shutdown()


def connect(address: str, local_cpus: int | None = None) -> Connection:
    """Join or start the cluster `address` names (the module docstring). `local_cpus`: logical CPUs of a
    cluster started here (None: this machine's cores)."""
    ray = ray_module()
    if ray.is_initialized():
        return Connection("(this process's)", started=False)
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"address must be 'local', 'auto', 'ray://HOST:PORT' or 'HOST:PORT', got {address!r}")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")   # no usage reports from a judge's machine
    if address == "local":
        ray.init(num_cpus=local_cpus, include_dashboard=False, log_to_driver=False)
        return Connection("local", started=True)
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise PoolError(f"no Ray cluster reached at {address!r} ({exc}); start one with `ray start --head` "
                        f"(docs/scale_out.md), or pass address='local' to start one for this pool") from exc
    return Connection(address, started=False)
