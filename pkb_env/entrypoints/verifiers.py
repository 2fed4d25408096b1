"""pkb-env as a verifiers environment (verifiers 0.4.0, `import verifiers.v1 as vf`): `PkbTaskset` and `PkbEnv`
(docs/integrations.md, examples/verifiers/README.md).

    vf-eval pkb_env.entrypoints.verifiers -m MODEL --client.base-url URL \\
        --env.taskset.tasks '["all_reduce"]' --env.taskset.task.executor cuda --env.taskset.task.world-size 8

verifiers 0.4.0 replaced 0.3's `MultiTurnEnv`/`Rubric`/`load_environment(**kw)` with tasksets, tasks whose
`@vf.reward` methods score a trace, and envs whose `run(task, agents)` drives the agent turn by turn; an env
is found by its taskset id, the name of an installed module exporting one Taskset and one Env subclass in
`__all__` (this module's full name works as the id; `environments/pkb_env_vf/` is the same as a package for
the hub). Here:

* `PkbTaskset` yields a task per suite task (or `tasks`): the prompt is the Gymnasium env's first-turn prompt;
* `PkbEnv.run` is the multi-turn episode (the Gymnasium env's rules, pkb_env/episode.py's Episode):
  each reply is judged, and until a correct one reaches `target_speedup` or `max_turns` replies were made, the
  judge's feedback is the next user message;
* `PkbTask.pkb_reward` is the rubric: the reward function (default: the env's shaped reward) of the judge's
  record of the last reply, the one the episode got for it (judged now where the episode did not judge it).

The judge settings are the task config's (`--env.taskset.task.*`): executor, world_size, preset, dtype,
judge_settings (any other JudgeConfig field), max_turns, target_speedup, reward. Every rollout of a process
with the same settings shares one judge client (pkb_env/shared.py), one step at a time.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from pydantic import Field

from pkb_env.extras import require

vf = require("verifiers.v1", "verifiers", "pkb_env.entrypoints.verifiers (the verifiers environment)")

from pkb_env.shared import shared_client  # noqa: E402
from pkb_env.config import JudgeConfig  # noqa: E402
from pkb_env.episode import Episode  # noqa: E402
from pkb_env.record import EvaluationRecord  # noqa: E402
from pkb_env.settings import reward_function  # noqa: E402
from verifiers.v1.harnesses.null import NullHarness  # noqa: E402

__all__ = ["PkbChat", "PkbEnv", "PkbTaskset"]
TASKSET_ID = "pkb_env_vf"   # the installed module verifiers imports by this id (environments/pkb_env_vf)


class PkbTaskConfig(vf.TaskConfig):
    """The judge and the episode, for every task (`--env.taskset.task.*`)."""

    executor: str = "auto"
    world_size: int = 4
    preset: str = "tiny"
    dtype: str | None = None
    judge_settings: dict[str, Any] = Field(default_factory=dict)
    """Any other JudgeConfig setting (pkb_env/config.py), e.g. {"trials": 5}."""
    max_turns: int = 4
    target_speedup: float = 1.0
    reward: str = "default"

    def judge_config(self) -> JudgeConfig:
        return JudgeConfig.from_mapping({**self.judge_settings, "executor": self.executor,
                                         "world_size": self.world_size, "preset": self.preset, "dtype": self.dtype})


class PkbTaskData(vf.TaskData):
    task: str
    """The suite task's name (`pkb-env tasks`)."""


class PkbTask(vf.Task[PkbTaskData, vf.State, PkbTaskConfig]):
    """One suite task; its reward is the judge's."""

    @vf.reward
    async def pkb_reward(self, trace: vf.Trace) -> float:
        config = self.config
        reply = trace.last_reply or ""
        record = _judged.pop((self.data.task, reply), None)
        if record is None:   # the episode did not judge this reply (it ended before, or ran elsewhere)
            client = shared_client(config.judge_config())
            record = await asyncio.wrap_future(client.submit(self.data.task, reply))
        return float(reward_function(config.reward, "env.taskset.task.reward")(record).value)


class PkbTasksetConfig(vf.TasksetConfig):
    tasks: list[str] | None = None
    """Suite tasks to load (None: every task that runs at the task config's world size and preset)."""
    task: PkbTaskConfig = PkbTaskConfig()


class PkbTaskset(vf.Taskset[PkbTask, PkbTasksetConfig]):
    def load(self) -> list[PkbTask]:
        config = self.config.task
        client = shared_client(config.judge_config())
        names = self.config.tasks or client.tasks()
        tasks = []
        for i, name in enumerate(names):
            prompt = client.observation(name)["prompt"]   # TaskError listing the suite; starts nothing
            tasks.append(PkbTask(PkbTaskData(idx=i, task=name, prompt=prompt), config))
        return tasks


class PkbChat(NullHarness):
    """The agent's program: verifiers' plain chat (no tools), this environment's default harness. The model
    only writes code; the judge runs it, in its own sandbox (docs/containment.md)."""


class PkbEnvConfig(vf.SingleAgentEnvConfig):
    """One agent seat whose chat program runs as a local process: it holds no candidate code, so it needs no
    sandbox of verifiers' (whose default, a Prime sandbox, wants a login and a tunnel)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class PkbEnv(vf.Env[PkbEnvConfig]):
    """The multi-turn episode (the module docstring): the judge's feedback is the next user message."""

    async def run(self, task: PkbTask, agents: Any) -> None:
        config = task.config
        client = shared_client(config.judge_config())
        episode = await asyncio.to_thread(Episode, client, task.data.task, reward_function(
            config.reward, "env.taskset.task.reward"), config.max_turns, config.target_speedup,
            where="env.taskset.task")
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                reply = segment.last_reply
                turn = await episode.astep(reply)
                _remember((task.data.task, reply), turn.record)
                if episode.over:
                    break
                message = await asyncio.to_thread(episode.next_message, turn.record)
                segment = await interaction.turn(message)


# the records of the replies the episodes judged, for the reward to find instead of judging them again
_judged: OrderedDict[tuple[str, str], EvaluationRecord] = OrderedDict()


def _remember(key: tuple[str, str], record: EvaluationRecord, keep: int = 1024) -> None:
    _judged[key] = record
    while len(_judged) > keep:
        _judged.popitem(last=False)


def load_environment(task: str | list[str] | None = None, world_size: int = 4, executor: str = "auto",
                     preset: str = "tiny", max_turns: int = 4, target_speedup: float = 1.0, reward: str = "default",
                     **judge_settings: Any) -> PkbEnv:
    """The environment built as `vf-eval pkb_env_vf` builds it (verifiers' own loader over this taskset's id),
    from keyword settings as verifiers 0.3's `load_environment` took them: `task` a name or a list (None: the
    suite at that world size and preset), `judge_settings` any other JudgeConfig field. Needs the
    `pkb_env_vf` package installed (`pip install -e environments/pkb_env_vf`)."""
    tasks = [task] if isinstance(task, str) else task
    task_config = {"executor": executor, "world_size": world_size, "preset": preset, "max_turns": max_turns,
                   "target_speedup": target_speedup, "reward": reward, "judge_settings": judge_settings}
    config = vf.resolve_env_config({"taskset": {"id": TASKSET_ID, "tasks": tasks, "task": task_config}})
    return vf.load_environment(config)
