"""The environment variables a rank process gets: an allowlist, never the user's secrets."""
from __future__ import annotations

import os
import re

ALLOWED = re.compile(r"^(PATH|LANG|LC_[A-Z]+|TZ|LD_LIBRARY_PATH|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|"
                     r"CUDA_[A-Z_]+|NVIDIA_[A-Z_]+|NCCL_[A-Z_]+|NVSHMEM_[A-Z_]+|TORCH_[A-Z_]+|"
                     r"CUPY_[A-Z_]+|TRITON_[A-Z_]+|GLOO_[A-Z_]+|OMP_NUM_THREADS|MKL_NUM_THREADS|"
                     r"OPENBLAS_[A-Z_]+)$")
SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)

# NVLink multicast/NVLS stays off on every GPU process we start (it can put a shared host's GPUs out of service):
# NCCL, torch's symmetric memory (read at every rendezvous) and NVSHMEM read these. Nothing overrides them (not
# `extra`); a candidate that writes them is refused by the screen and caught by the rank's tripwire
# (ranks/tripwire.py); the pool's actors get them too (pool/fleet.py).
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
FORCED = {
    **MULTICAST_OFF,
    "GLOO_SOCKET_IFNAME": "lo",
    "OMP_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


def rank_environment(extra: dict[str, str] | None = None, source: dict[str, str] | None = None) -> dict[str, str]:
    """Allowlisted variables of `source` (default: os.environ), minus anything secret-looking, plus FORCED;
    `extra` may change any of them but NVLink multicast's switches."""
    source = os.environ if source is None else source
    env = {k: v for k, v in source.items() if ALLOWED.match(k) and not SECRET.search(k)}
    env.update(FORCED)
    env.update(extra or {})
    env.update(MULTICAST_OFF)
    return env
