"""A SkyRL-Gym text env over the judge: `PkbTextEnv`, registered as "pkb_env" on import (docs/integrations.md,
examples/skyrl/README.md).

    import pkb_env.entrypoints.skyrl       # registers "pkb_env" with skyrl_gym
    env = skyrl_gym.make("pkb_env", env_config={"executor": "cuda", "world_size": 8, "max_turns": 4},
                         extras={"task": "all_reduce"})
    chat, info = env.init(prompt)          # the row's prompt (empty: the task's own first-turn prompt)
    out = env.step(completion)             # BaseTextEnvStepOutput: observations, reward, done, metadata

SkyRL (skyrl-gym 0.4.0) makes one env per trajectory from a dataset row (`env_class: pkb_env`, the row's other
columns as `extras`) and the `env_config` of that env class, and steps it synchronously from its
generator's thread pool. A step judges the completion on the row's task and returns the turn's reward (the
reward function of `reward`, default the env's shaped reward, as ParallelKernelEnv.step returns it); the
episode ends, as the Gymnasium env's does (pkb_env/episode.py), when a correct completion reaches
`target_speedup` (or is correct where speed is not measured), or after `max_turns` completions. Until
then the judge's feedback on the completion (the "Result of your previous attempt" section of the prompt)
is the next user message; the first prompt stays in SkyRL's chat history, so it is not sent again.

The task is the row's `task` column (extras["task"]), else its extra_info.task.
env_config: any JudgeConfig setting (executor, world_size, preset, dtype, deadlines, ...), max_turns
(default 4; skyrl-train's generator puts its generator.max_turns in extras, which then wins), target_speedup
(1.0), reward ("default"). Every env of a process with the same judge settings
shares one judge client (pkb_env/shared.py), one step at a time.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from pkb_env.extras import require

require("skyrl_gym", "skyrl", "pkb_env.entrypoints.skyrl (SkyRL's PkbTextEnv)")

from skyrl_gym.envs import register  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType  # noqa: E402
from skyrl_gym.envs.registration import registry  # noqa: E402

from pkb_env.shared import shared_client  # noqa: E402
from pkb_env.episode import Episode  # noqa: E402
from pkb_env.settings import plain, read_settings, reward_function  # noqa: E402

ENV_ID = "pkb_env"
OPTIONS = {"max_turns": 4, "target_speedup": 1.0, "reward": "default"}


class PkbTextEnv(BaseTextEnv):
    """One multi-turn episode on one task (the module docstring)."""

    def __init__(self, env_config: Any = None, extras: Dict[str, Any] | None = None):
        super().__init__()
        settings = read_settings(env_config, "env_config", OPTIONS)
        extras = plain(extras or {})
        extras = extras if isinstance(extras, dict) else {}
        max_turns = extras.get("max_turns", settings.options["max_turns"])   # skyrl-train's generator.max_turns
        info = extras.get("extra_info") if isinstance(extras.get("extra_info"), dict) else {}
        task = extras.get("task") or info.get("task")
        if not task:
            raise ValueError("no task for this env: SkyRL passes a dataset row's columns as extras, so give every "
                             "row a 'task' column (or extra_info.task) with the task's name (`pkb-env tasks` lists "
                             "them; examples/skyrl/README.md shows a row)")
        reward_fn = reward_function(settings.options["reward"], "env_config")
        self.client = shared_client(settings.config)
        self.episode = Episode(self.client, str(task), reward_fn, max_turns, settings.options["target_speedup"],
                               where="env_config's, or the extras' that skyrl-train's generator sets")   # TaskError
        self.max_turns = self.episode.max_turns

    def init(self, prompt: ConversationType) -> Tuple[ConversationType, Dict[str, Any]]:
        """The row's prompt as it is, or (none given) the task's first-turn prompt as one user message."""
        episode = self.episode
        chat = list(prompt) if prompt else [{"role": "user", "content": episode.observation()["prompt"]}]
        return chat, {"task": episode.task, "world_size": self.client.config.world_size,
                      "executor": self.client.info.name}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        episode = self.episode
        turn = episode.step(action)     # raises once the episode is over: SkyRL makes a new env per trajectory
        self.turns = episode.turns
        done = episode.over
        observations = [] if done else [{"role": "user", "content": episode.next_message(turn.record)}]
        return BaseTextEnvStepOutput(observations=observations, reward=turn.reward, done=done,
                                     metadata={k: v for k, v in turn.info.items() if k != "record"})

    def get_metrics(self) -> Dict[str, Any]:
        return self.episode.metrics()

    @staticmethod
    def aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
        """Means over episodes; best_speedup over the episodes that measured one (None where none did)."""
        if not metrics:
            return {}
        n = len(metrics)
        speedups = [m["best_speedup"] for m in metrics if m.get("best_speedup") is not None]
        return {"solve_rate": sum(m["solved"] for m in metrics) / n,
                "mean_turns": sum(m["turns"] for m in metrics) / n,
                "mean_best_reward": sum(m["best_reward"] for m in metrics) / n,
                "mean_best_speedup": sum(speedups) / len(speedups) if speedups else None,
                "judge_errors": sum(m["judge_errors"] for m in metrics)}


if ENV_ID not in registry:
    register(id=ENV_ID, entry_point=f"{__name__}:PkbTextEnv")
