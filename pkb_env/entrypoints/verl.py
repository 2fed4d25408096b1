"""verl's custom reward function over the judge: `compute_score` (docs/integrations.md, examples/verl/README.md).

    python examples/verl/make_dataset.py --executor cuda --world-size 8 --out data/pkb   # the suite as verl parquet
    python -m verl.trainer.main_ppo ... \\
        reward.custom_reward_function.path=pkg://pkb_env.entrypoints.verl \\
        reward.custom_reward_function.name=compute_score reward.num_workers=1 \\
        +reward.custom_reward_function.reward_kwargs.executor=cuda \\
        +reward.custom_reward_function.reward_kwargs.world_size=8

(or examples/verl/pkb_grpo.yaml, which holds these). verl (0.9.1: verl/trainer/ppo/reward.py,
get_custom_reward_fn) loads this function from the module (or its file), binds
`reward_kwargs` to it, and its naive reward manager awaits it once per sample
(`compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`), the reward loop running a
batch's samples as concurrent coroutines. Each call judges `solution_str` (the decoded response: a raw
completion, the last ```python block is used) on the row's task and returns the reward (`score`) with the
judge's findings, under the same keys for every outcome: verl's agent loop stacks every sample's keys
and raises KeyError where one lacks a key the first had.

* reward_kwargs: any JudgeConfig setting (executor, world_size, preset, dtype, the deadlines, ...), and
  `reward` (a reward config's name or YAML path, default "default": the env's shaped reward), and
  `pool_address` (a Ray address: judge on a JudgePool there, docs/scale_out.md) with `pool_actors`.
* the row: the task is `extra_info["task"]`, else `reward_model.ground_truth` (a task name, or the JSON
  `{"task", "preset", "dtype", "world_size"}` that `pkb-env data export --format verl` and
  examples/verl/make_dataset.py write); executor, world_size, preset, dtype and reward in ground_truth's
  JSON or in extra_info override reward_kwargs for that row (the prompt was written for them).

A step the judge itself could not judge (Verdict.JUDGE_ERROR: a lost pool actor, a judge that failed,
never the code's fault) scores the reward's unjudged value (0 for the shipped rewards) with `judged` 0.0,
since verl has no "no reward" for a sample; filter on `judged` where that matters.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Mapping

from pkb_env.shared import shared_client
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import RewardFunction
from pkb_env.settings import plain, read_settings, reward_function

OPTIONS = {"reward": "default", "pool_address": None, "pool_actors": None}
ROW_SETTINGS = ("executor", "world_size", "preset", "dtype", "reward")
# what verl itself adds to the call when a reward model is served; not the judge's business
VERL_OWN = ("reward_router_address", "reward_model_tokenizer")
KEYS = ("score", "correct", "judged", "verdict", "speedup", "roofline_fraction", "task", "error")
WHERE = "reward.custom_reward_function.reward_kwargs (with the row's overrides)"


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping | None = None,
                        **reward_kwargs: Any) -> dict[str, Any]:
    """Judge one response; a dict of KEYS (the module docstring). Bad settings or rows raise, naming the fix."""
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be the decoded response (a str), got {type(solution_str).__name__}")
    task, row = row_target(ground_truth, extra_info)
    # a row's size and dtype are the step's, not the judge's: rows of every preset share one judge
    preset, dtype = row.pop("preset", None), row.pop("dtype", None)
    given = {k: v for k, v in reward_kwargs.items() if k not in VERL_OWN}
    settings = read_settings({**given, **row}, WHERE, OPTIONS)
    reward_fn = reward_function(settings.options["reward"], WHERE)
    address = settings.options["pool_address"]
    client = await asyncio.to_thread(shared_client, settings.config, str(address) if address else None,
                                     settings.options["pool_actors"])
    future = await asyncio.to_thread(client.submit, task, solution_str, preset, dtype)
    return score_of(await asyncio.wrap_future(future), reward_fn)


def score_of(record: EvaluationRecord, reward_fn: RewardFunction) -> dict[str, Any]:
    """The result verl logs for one sample: the same KEYS whatever happened (None where nothing was measured)."""
    return {
        "score": float(reward_fn(record).value),
        "correct": float(record.correct),
        "judged": float(record.judged),
        "verdict": record.verdict.value if record.verdict else "",
        "speedup": record.speedup,
        "roofline_fraction": record.roofline_fraction,
        "task": record.task,
        "error": record.error or "",
    }


def row_target(ground_truth: Any, extra_info: Mapping | None) -> tuple[str, dict[str, Any]]:
    """The row's task and its per-row judge settings, from extra_info and reward_model.ground_truth."""
    target = plain(ground_truth)
    if isinstance(target, str) and target.lstrip().startswith("{"):
        try:
            target = json.loads(target)
        except json.JSONDecodeError as exc:
            raise ValueError(f"reward_model.ground_truth looks like JSON but does not parse ({exc}); write a task "
                             f"name or the JSON of task, preset, dtype, world_size") from exc
    if isinstance(target, str):
        target = {"task": target} if target.strip() else {}
    if not isinstance(target, dict):
        raise ValueError(f"reward_model.ground_truth must be a task name or a JSON object with 'task', got "
                         f"{type(target).__name__}")
    info = plain(extra_info) or {}
    if not isinstance(info, dict):
        raise ValueError(f"extra_info must be a mapping, got {type(info).__name__}")
    row = {}
    for source in (target, info):
        row.update({k: source[k] for k in ROW_SETTINGS if source.get(k) is not None})
    task = info.get("task") or target.get("task")
    if not task:
        raise ValueError("no task for this row: set extra_info.task (examples/verl/make_dataset.py and `pkb-env "
                         "data export --format verl` write it) or reward_model.ground_truth to the task's name "
                         "(`pkb-env tasks` lists them)")
    return str(task), row
