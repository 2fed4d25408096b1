"""Optional dependencies, each behind the pip extra that installs it, and one error that names the extra.

The env itself needs torch, gymnasium, numpy, pyyaml, psutil and tqdm. Everything else is an extra
(pyproject.toml), imported only where it is used, so that a missing one fails there with the command that
fixes it instead of a bare ModuleNotFoundError:

| extra   | installs                     | needed by                                                   |
|---------|------------------------------|-------------------------------------------------------------|
| cuda12  | cupy-cuda12x, nvidia-ml-py   | NVRTC kernel compiles and NVML topology on CUDA 12 machines |
| cuda13  | cupy-cuda13x, nvidia-ml-py   | the same on CUDA 13 machines                                |
| llm     | transformers                 | TransformersAgent                                           |
| train   | transformers, trl            | agents/train_grpo.py; TRL's GRPOTrainer around trl_reward   |
| wandb   | wandb                        | WandbLogger, train_grpo --track                             |
| plot    | matplotlib                   | `pkb-env evaluate`'s speedup-vs-roofline PNG                |
| ray     | ray                          | pkb_env.pool: JudgePool, RayVectorEnv, `evaluate --ray`      |
| data    | datasets, pyarrow            | episode datasets: pkb_env.data, `pkb-env data`, `--dataset` |
| verl    | verl, datasets, pyarrow      | verl's trainer around integrations.verl.compute_score; examples/verl/make_dataset.py |
| skyrl   | skyrl-gym                    | pkb_env.entrypoints.skyrl: PkbTextEnv, SkyRL's "pkb_env" env |
| openenv | openenv-core                 | `pkb-env serve`, pkb_env.entrypoints.openenv: PkbEnvClient  |
| verifiers | verifiers, uv              | pkb_env.entrypoints.verifiers, `vf-eval pkb_env_vf`         |
| dev     | all of the above but CUDA and verl, pytest, pytest-timeout | the test suite                |
"""
from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the pip extra that installs it."""


def require(module: str, extra: str, needed_for: str) -> ModuleType:
    """Import `module`, or raise MissingExtra saying `needed_for` needs `pip install 'pkb-env[EXTRA]'`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise MissingExtra(f"{needed_for} needs the {top!r} package, which is not installed here: "
                           f"pip install 'pkb-env[{extra}]'") from exc
