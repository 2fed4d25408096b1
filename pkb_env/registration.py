"""Gymnasium registration (also reached through the `gymnasium.envs` entry point)."""
import gymnasium

ENV_ID = "pkb_env/ParallelKernel-v0"


def register_envs() -> None:
    if ENV_ID not in gymnasium.registry:
        # nondeterministic: the reward depends on measured times, which vary between runs.
        gymnasium.register(ENV_ID, entry_point="pkb_env.entrypoints.gym:ParallelKernelEnv", nondeterministic=True)
