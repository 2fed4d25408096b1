"""pkb-env: a Gymnasium environment for training and judging code models that write multi-GPU kernels.

The judge's core is `JudgeService`, configured by one `JudgeConfig`; every door reaches it through one client:

    from pkb_env import JudgeConfig, LocalClient
    with LocalClient(JudgeConfig(executor="cpu", world_size=4)) as client:
        record = client.submit("all_reduce", code).result()

`import pkb_env` also registers `pkb_env/ParallelKernel-v0`, the Gymnasium env over it (pkb_env/entrypoints/gym):

    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=4, executor="cpu")

The names below are imported on first use, so that `import pkb_env` stays cheap (no torch) for commands
that refuse bad arguments before anything starts.
"""
from importlib import import_module

from pkb_env.registration import ENV_ID, register_envs

__version__ = "0.3.0"
_LAZY = {"JudgeConfig": "pkb_env.config", "JudgeService": "pkb_env.service", "TaskSession": "pkb_env.service",
         "JudgeClient": "pkb_env.client", "LocalClient": "pkb_env.client", "Episode": "pkb_env.episode",
         "EvaluationRecord": "pkb_env.record", "JudgeError": "pkb_env.errors"}
__all__ = ["ENV_ID", "register_envs", "__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pkb_env' has no attribute {name!r}")


register_envs()
