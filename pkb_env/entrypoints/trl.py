"""pkb-env as a reward function for TRL's GRPOTrainer (`reward_funcs=[make_trl_reward(...)]`), over a judge client.

This module needs only the judge; TRL itself comes with `pip install 'pkb-env[train]'`.

    from trl import GRPOConfig, GRPOTrainer
    from pkb_env import JudgeConfig
    from pkb_env.entrypoints.trl import make_trl_reward

    reward = make_trl_reward(JudgeConfig(world_size=4, executor="cpu"))   # or a mapping: {"world_size": 4, ...}
    # dataset rows: {"prompt": task.prompt (or [{"role": "user", "content": ...}]), "task": "all_reduce"}
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset, args=GRPOConfig(...))
    trainer.train()
    reward.close()                                   # stops the judge's rank processes

Each batch is judged by one judge client (pkb_env/client.py: `client.map(batch)`), and each completion scored by
the reward function named by `reward` (default: the shaped reward, in [-1, 1]): the same value a
single-turn episode of the env returns. On a local judge the batch's steps run in turn (N completions cost N
steps); the client is made on the first call, not at construction, and is left out of pickling, so the callable
can be copied to workers that make their own. On a Ray pool (pkb_env/pool/, docs/scale_out.md) the whole batch is
judged at once, on the caller's pool:

    pool = JudgePool(JudgeConfig(executor="cuda", world_size=2), address="auto")
    reward = make_trl_reward(client=pool, deadline_s=900)    # `deadline_s` bounds a batch

A step the judge could not judge (Verdict.JUDGE_ERROR) gets None, TRL's "no reward for this sample", never a
penalty the code did not earn.

.. versionchanged:: 0.3 `pool=` became `client=` (any JudgeClient); one class, `PkbReward`, for both.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pkb_env.agents.messages import completion_text
from pkb_env.config import JudgeConfig


class PkbReward:
    """A TRL reward function backed by a judge client. See the module docstring.

    Call signature (TRL's): reward(prompts, completions, **kwargs) -> list[float | None]. The task of completion i
    is kwargs[task_column][i] (TRL repeats every dataset column per completion), else kwargs["task_id"][i]
    (the observation's key, for datasets built from observations). Without either column every completion
    is judged on `task` when one is given; otherwise the call is refused (a batch judged on the wrong task
    would look like a bad policy, not a missing column).
    After a call, `last_infos` holds each step's info (the env's keys, minus the record).
    If TRL passes `log_metric`, the batch's fraction correct and mean speedup are logged through it.
    `client`: the caller's (left open by `close`); else a LocalClient made from `config` at the first call.
    """

    def __init__(self, config: JudgeConfig | None = None, task: str | None = None, reward: str = "default",
                 task_column: str = "task", client=None, deadline_s: float | None = None):
        from pkb_env.rewards import load_reward

        self.__name__ = "pkb_env"  # TRL names the reward's logged column after this
        self.config = client.config if client is not None else config or JudgeConfig()
        self.task = task
        self.reward_fn = load_reward(reward)
        self.task_column = task_column
        self.deadline_s = deadline_s
        self.client = client
        self._own_client = client is None
        self.last_infos: list[dict[str, Any]] = []

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs) -> list[float]:
        from pkb_env.client import LocalClient

        tasks = self._tasks(kwargs, len(completions))
        if self.client is None:
            self.client = LocalClient(self.config)
        batch = [(task, completion_text(completion)) for task, completion in zip(tasks, completions)]
        return self._score(self.client.map(batch, self.deadline_s), kwargs.get("log_metric"))

    def _score(self, records, log_metric) -> list[float | None]:
        """Each record's reward (None for one the judge could not judge), `last_infos`, and the batch's metrics."""
        from pkb_env.episode import step_info

        rewards, infos = [], []
        for record in records:
            result = self.reward_fn(record)
            rewards.append(float(result.value) if record.judged else None)
            infos.append({k: v for k, v in step_info(record, result).items() if k != "record"})
        self.last_infos = infos
        if callable(log_metric) and infos:
            log_metric("pkb_env/frac_correct", sum(bool(i["correct"]) for i in infos) / len(infos))
            speedups = [i["speedup"] for i in infos if i["correct"] and i["speedup"] is not None]
            if speedups:
                log_metric("pkb_env/mean_speedup", sum(speedups) / len(speedups))
        return rewards

    def _tasks(self, columns: Mapping[str, Any], count: int) -> list[str]:
        """The task of each completion: from the task column, the task_id column, or the one task given."""
        for column in dict.fromkeys((self.task_column, "task_id")):
            tasks = columns.get(column)
            if tasks is None:
                continue
            if len(tasks) != count:
                raise ValueError(f"column {column!r} has {len(tasks)} values for {count} completions; TRL passes one "
                                 f"per completion: check the dataset's {column!r} column")
            return [str(task) for task in tasks]
        if self.task is not None:
            return [self.task] * count
        raise ValueError(f"no task for the completions: the batch has no {self.task_column!r} or 'task_id' column "
                         f"(columns here: {sorted(k for k, v in columns.items() if not callable(v))}) "
                         f"and no single task was given. Add a {self.task_column!r} column with each row's task "
                         f"name to the dataset, or pass make_trl_reward(..., task='all_reduce') to judge every "
                         f"completion on one task")

    def close(self) -> None:
        """Stop the judge this reward made and its rank processes (a later call makes a new one); a client given
        is the caller's to close."""
        if self._own_client and self.client is not None:
            self.client.close()
            self.client = None

    def __getstate__(self) -> dict[str, Any]:
        if not self._own_client:
            raise TypeError("a reward over a given client does not travel: make it where the client lives")
        state = dict(self.__dict__)
        state["client"], state["last_infos"] = None, []  # rank processes do not travel: each copy makes its own
        return state

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def make_trl_reward(config: JudgeConfig | Mapping[str, Any] | None = None, task: str | None = None,
                    reward: str = "default", task_column: str = "task", client=None,
                    deadline_s: float | None = None) -> PkbReward:
    """A callable for GRPOTrainer(reward_funcs=[...]). `config`: a JudgeConfig, or a mapping of its settings
    (which may also carry "task" and "reward", as YAML configs do). `client`: a judge client to judge on instead
    (a JudgePool judges each batch concurrently; then the client's config holds). `deadline_s` bounds a batch."""
    if isinstance(config, Mapping):
        values = dict(config)
        task, reward = values.pop("task", task), values.pop("reward", reward)
        config = JudgeConfig.from_mapping(values)
    if client is not None and config is not None:
        raise ValueError("pass either config or client: a client judges with its own config (client.config)")
    return PkbReward(config, task, reward, task_column, client, deadline_s)
