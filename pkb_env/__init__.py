"""pkb-env: a Gymnasium environment for training and judging code models that write multi-GPU kernels.

`import pkb_env` registers `pkb_env/ParallelKernel-v0`:

    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=4, executor="cpu")
"""
from pkb_env.registration import ENV_ID, register_envs

__version__ = "0.1.0"
__all__ = ["ENV_ID", "register_envs", "__version__"]

register_envs()
