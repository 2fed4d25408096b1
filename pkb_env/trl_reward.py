"""pkb-env as a reward function for TRL's GRPOTrainer (`reward_funcs=[make_trl_reward({...})]`).

This module needs only the env; TRL itself comes with `pip install 'pkb-env[train]'`.

    from trl import GRPOConfig, GRPOTrainer
    from pkb_env.trl_reward import make_trl_reward

    reward = make_trl_reward({"world_size": 4, "executor": "cpu"})
    # dataset rows: {"prompt": obs["prompt"] (or [{"role": "user", "content": obs["prompt"]}]), "task": "all_reduce"}
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset, args=GRPOConfig(...))
    trainer.train()
    reward.close()                                   # stops the env's rank processes

Each completion is judged as one single-turn episode of ONE env instance: `env.reset(options={"task":
row_task})`, then `env.step(completion_text)`; the reward is the env's (default: shaped, in [-1, 1]). Calls
are sequential: a batch of N completions costs N judge steps. The env is made on the first call, not at
construction, and is left out of pickling, so the callable can be copied to workers that make their own.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import gymnasium

from pkb_env.registration import ENV_ID


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a str, or a conversational list of messages (assistant content joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        parts = []
        for message in completion:
            if not isinstance(message, Mapping) or "content" not in message:
                raise TypeError(f"a conversational completion must be a list of {{'role', 'content'}} dicts, got "
                                f"{type(message).__name__}: pass strings or TRL's message lists")
            if message.get("role", "assistant") == "assistant":
                content = message["content"]
                if isinstance(content, list):  # multimodal-style content blocks
                    content = "".join(block.get("text", "") for block in content if isinstance(block, Mapping))
                parts.append(content or "")
        return "\n".join(parts)
    raise TypeError(f"completion must be a str or a list of messages, got {type(completion).__name__}")


class PkbEnvReward:
    """A TRL reward function backed by one `pkb_env/ParallelKernel-v0` env. See the module docstring.

    Call signature (TRL's): reward(prompts, completions, **kwargs) -> list[float]. The task of completion i
    is kwargs[task_column][i] (TRL repeats every dataset column per completion), else kwargs["task_id"][i]
    (the observation's key, for datasets built from observations). Without either column every completion
    is judged on env_kwargs["task"] when that names one task; otherwise the call is refused (a batch
    judged on the wrong task would look like a bad policy, not a missing column).
    After a call, `last_infos` holds each step's info (minus the record).
    If TRL passes `log_metric`, the batch's fraction correct and mean speedup are logged through it.
    """

    def __init__(self, env_kwargs: Mapping[str, Any] | None = None, task_column: str = "task"):
        self.__name__ = "pkb_env"  # TRL names the reward's logged column after this
        self.env_kwargs = dict(env_kwargs or {})
        self.env_kwargs.setdefault("max_turns", 1)
        self.task_column = task_column
        self.env: gymnasium.Env | None = None
        self.last_infos: list[dict[str, Any]] = []

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs) -> list[float]:
        tasks = self._tasks(kwargs, len(completions))
        if self.env is None:
            self.env = gymnasium.make(ENV_ID, **self.env_kwargs)
            self.env.reset()
        rewards, infos = [], []
        for i, completion in enumerate(completions):
            self.env.reset(options={"task": tasks[i]})
            _, reward, _, _, info = self.env.step(completion_text(completion))
            rewards.append(float(reward))
            infos.append({k: v for k, v in info.items() if k != "record"})
        self.last_infos = infos
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and infos:
            log_metric("pkb_env/frac_correct", sum(bool(i["correct"]) for i in infos) / len(infos))
            speedups = [i["speedup"] for i in infos if i["correct"] and i["speedup"] is not None]
            if speedups:
                log_metric("pkb_env/mean_speedup", sum(speedups) / len(speedups))
        return rewards

    def _tasks(self, columns: Mapping[str, Any], count: int) -> list[str]:
        """The task of each completion: from the task column, the task_id column, or the env's one task."""
        for column in dict.fromkeys((self.task_column, "task_id")):
            tasks = columns.get(column)
            if tasks is None:
                continue
            if len(tasks) != count:
                raise ValueError(f"column {column!r} has {len(tasks)} values for {count} completions; TRL passes one "
                                 f"per completion: check the dataset's {column!r} column")
            return [str(task) for task in tasks]
        fixed = self.env_kwargs.get("task")
        if isinstance(fixed, str):
            return [fixed] * count
        raise ValueError(f"no task for the completions: the batch has no {self.task_column!r} or 'task_id' column "
                         f"(columns here: {sorted(k for k, v in columns.items() if not callable(v))}) "
                         f"and env_kwargs names no single task. Add a {self.task_column!r} column with each row's "
                         f"task name to the dataset, or pass make_trl_reward({{'task': 'all_reduce', ...}}) to judge "
                         f"every completion on one task")

    def close(self) -> None:
        """Stop the env and its rank processes (a later call makes a new env)."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["env"], state["last_infos"] = None, []  # rank processes do not travel: each copy makes its own env
        return state

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def make_trl_reward(env_kwargs: Mapping[str, Any] | None = None, task_column: str = "task") -> PkbEnvReward:
    """A callable for GRPOTrainer(reward_funcs=[...]); env_kwargs go to gymnasium.make (max_turns defaults to 1)."""
    return PkbEnvReward(env_kwargs, task_column)
