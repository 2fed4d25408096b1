"""Judging at scale on Ray: `JudgePool` (pool.py), a JudgeClient over judge actors; docs/scale_out.md.

Needs `pip install 'pkb-env[ray]'`; the names are imported on first use, so that the rest of pkb_env never
imports Ray.
"""
from importlib import import_module

_LAZY = {"JudgePool": "pkb_env.pool.pool", "PoolError": "pkb_env.errors"}
__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pkb_env.pool' has no attribute {name!r}")
