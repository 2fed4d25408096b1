"""The Gymnasium door: `ParallelKernelEnv` (registered as "pkb_env/ParallelKernel-v0"), `RayVectorEnv` (its
episodes judged together on a Ray pool), and the wrappers `WandbLogger` (a run's logs) and `RecordEpisodes` (an
episode dataset). Each keeps its episodes with pkb_env/episode.py and judges through pkb_env/client.py.

The names are imported on first use: `import pkb_env` registers the env without importing any of them.
"""
from importlib import import_module

_LAZY = {"ParallelKernelEnv": "pkb_env.entrypoints.gym.env", "RayVectorEnv": "pkb_env.entrypoints.gym.vector",
         "WandbLogger": "pkb_env.entrypoints.gym.wandb", "RecordEpisodes": "pkb_env.entrypoints.gym.recording"}
__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pkb_env.entrypoints.gym' has no attribute {name!r}")
