"""The judge's cache directory: calibrations (topology.py) and built kernels (judge/compiler.py).

`$PKB_ENV_CACHE`, else `~/.cache/pkb_env`. Only the judge's own process writes here; a candidate's cell
never sees it (executors/rootfs.py refuses to bind it).
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("PKB_ENV_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pkb_env")
    return Path(base)
