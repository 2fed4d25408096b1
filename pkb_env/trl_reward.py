"""pkb-env as a reward function for TRL's GRPOTrainer (`reward_funcs=[make_trl_reward(...)]`), over the JudgeService.

This module needs only the judge; TRL itself comes with `pip install 'pkb-env[train]'`.

    from trl import GRPOConfig, GRPOTrainer
    from pkb_env import JudgeConfig
    from pkb_env.trl_reward import make_trl_reward

    reward = make_trl_reward(JudgeConfig(world_size=4, executor="cpu"))   # or a mapping: {"world_size": 4, ...}
    # dataset rows: {"prompt": task.prompt (or [{"role": "user", "content": ...}]), "task": "all_reduce"}
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset, args=GRPOConfig(...))
    trainer.train()
    reward.close()                                   # stops the judge's rank processes

Each completion is judged on its row's task by one JudgeService (`open(task).judge(text)`), and scored by
the reward function named by `reward` (default: the shaped reward, in [-1, 1]): the same value a
single-turn episode of the env returns. Calls are sequential: a batch of N completions costs N judge
steps. The service is made on the first call, not at construction, and is left out of pickling, so the
callable can be copied to workers that make their own.

Over a Ray pool (pkb_env/pool/, docs/scale_out.md) the whole batch is judged at once:

    pool = JudgePool(JudgeConfig(executor="cuda", world_size=2), address="auto")
    reward = make_trl_reward(pool=pool, deadline_s=900)    # async: TRL awaits it beside its other rewards

A step the pool could not judge (Verdict.JUDGE_ERROR) gets None, TRL's "no reward for this sample", never a
penalty the code did not earn.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pkb_env.config import JudgeConfig


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


class PkbReward:
    """A TRL reward function backed by one JudgeService. See the module docstring.

    Call signature (TRL's): reward(prompts, completions, **kwargs) -> list[float]. The task of completion i
    is kwargs[task_column][i] (TRL repeats every dataset column per completion), else kwargs["task_id"][i]
    (the observation's key, for datasets built from observations). Without either column every completion
    is judged on `task` when one is given; otherwise the call is refused (a batch judged on the wrong task
    would look like a bad policy, not a missing column).
    After a call, `last_infos` holds each step's info (the env's keys, minus the record).
    If TRL passes `log_metric`, the batch's fraction correct and mean speedup are logged through it.
    """

    def __init__(self, config: JudgeConfig | None = None, task: str | None = None, reward: str = "default",
                 task_column: str = "task"):
        from pkb_env.rewards import load_reward

        self.__name__ = "pkb_env"  # TRL names the reward's logged column after this
        self.config = config or JudgeConfig()
        self.task = task
        self.reward_fn = load_reward(reward)
        self.task_column = task_column
        self.judge = None   # a JudgeService, made at the first call
        self.last_infos: list[dict[str, Any]] = []

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs) -> list[float]:
        from pkb_env.service import JudgeService

        tasks = self._tasks(kwargs, len(completions))
        if self.judge is None:
            self.judge = JudgeService(self.config)
        records = [self.judge.judge(task, completion_text(completion)) for task, completion in zip(tasks, completions)]
        return self._score(records, kwargs.get("log_metric"))

    def _score(self, records, log_metric) -> list[float | None]:
        """Each record's reward (None for one the judge could not judge), `last_infos`, and the batch's metrics."""
        from pkb_env.env import step_info

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
        """Stop the judge and its rank processes (a later call makes a new one)."""
        if self.judge is not None:
            self.judge.close()
            self.judge = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["judge"], state["last_infos"] = None, []  # rank processes do not travel: each copy makes its own
        return state

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class PkbPoolReward(PkbReward):
    """The TRL reward over a JudgePool: async, the batch judged concurrently (the module docstring).

    `deadline_s` bounds the whole batch (pool.map's deadline): what is unjudged by then gets None. The pool
    is the caller's: `close()` leaves it running."""

    def __init__(self, pool, task: str | None = None, reward: str = "default", task_column: str = "task",
                 deadline_s: float | None = None):
        super().__init__(pool.config, task, reward, task_column)
        self.pool, self.deadline_s = pool, deadline_s

    async def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                       **kwargs) -> list[float | None]:
        import asyncio

        tasks = self._tasks(kwargs, len(completions))
        batch = [(task, completion_text(completion)) for task, completion in zip(tasks, completions)]
        records = await asyncio.to_thread(self.pool.map, batch, self.deadline_s)
        return self._score(records, kwargs.get("log_metric"))

    def close(self) -> None:
        """The pool is the caller's to close."""

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a pool-backed reward does not travel: make it where the pool's handle lives")


def make_trl_reward(config: JudgeConfig | Mapping[str, Any] | None = None, task: str | None = None,
                    reward: str = "default", task_column: str = "task", pool=None,
                    deadline_s: float | None = None) -> PkbReward:
    """A callable for GRPOTrainer(reward_funcs=[...]). `config`: a JudgeConfig, or a mapping of its settings
    (which may also carry "task" and "reward", as YAML configs do). `pool`: a JudgePool to judge each batch on
    concurrently (then the pool's config holds; `deadline_s` bounds a batch)."""
    if isinstance(config, Mapping):
        values = dict(config)
        task, reward = values.pop("task", task), values.pop("reward", reward)
        config = JudgeConfig.from_mapping(values)
    if pool is not None:
        if config is not None:
            raise ValueError("pass either config or pool: a pool judges with its own config (pool.config)")
        return PkbPoolReward(pool, task, reward, task_column, deadline_s)
    if deadline_s is not None:
        raise ValueError("deadline_s bounds a pool's batch; without pool=, each step is bounded by the config's "
                         "step_budget_s")
    return PkbReward(config, task, reward, task_column)
