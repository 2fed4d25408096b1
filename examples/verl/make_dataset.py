"""The suite as verl's RL parquet: one row per task that runs at the given world size and preset.

    python examples/verl/make_dataset.py --executor cuda --world-size 8 --out data/pkb    # data/pkb/train.parquet

Rows have the layout of `pkb-env data export --format verl` (pkb_env/data/recipes.py: VERL_SCHEMA, written
by its write_parquet): `prompt` the task's first-turn prompt as one user message, `data_source` "pkb_env",
`reward_model.ground_truth` the JSON of task, preset, dtype and world size, and `extra_info.task`, which
pkb_env.entrypoints.verl.compute_score judges on (examples/verl/README.md). The prompt describes the
machine it is made on (executor, interconnect, measured bandwidths), so make it where training judges.
extra_info.executor is left empty: the executor is reward_kwargs' (a row's executor would override it).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pkb_env import JudgeConfig, JudgeService
from pkb_env.data.recipes import VERL_ABILITY, VERL_SCHEMA, VERL_SOURCE, write_parquet
from pkb_env.data.rows import config_hash


def suite_rows(config: JudgeConfig, tasks: list[str] | None = None, split: str = "train") -> list[dict]:
    """A verl row per task (every task that runs under `config` when `tasks` is None). Starts no rank process."""
    with JudgeService(config) as judge:
        names = tasks or judge.tasks()
        rows = []
        for index, name in enumerate(names):
            session = judge.open(name, prestart=False)   # TaskError naming the fix for a task that cannot run
            target = {"task": name, "preset": session.preset, "dtype": session.dtype, "world_size": config.world_size}
            rows.append({
                "data_source": VERL_SOURCE, "prompt": [{"role": "user", "content": session.prompt}],
                "ability": VERL_ABILITY,
                "reward_model": {"style": "rule", "ground_truth": json.dumps(target, sort_keys=True)},
                "extra_info": {"split": split, "index": index, "task": name, "pkb_id": session.spec.pkb_id,
                               "preset": session.preset, "dtype": session.dtype, "world_size": config.world_size,
                               "executor": None, "config_hash": config_hash(config), "best_speedup": None,
                               "steps": 0},
            })
    return rows


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", default="auto", help="cpu | cuda | cuda-emulated | auto (default)")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--preset", default="tiny", help="tiny (default) | bench | large")
    parser.add_argument("--tasks", default=None, help="comma-separated task names (default: the whole suite)")
    parser.add_argument("--split", default="train", help="extra_info.split of every row")
    parser.add_argument("--out", required=True, help="a folder (OUT/train.parquet) or a .parquet path")
    args = parser.parse_args(argv)
    config = JudgeConfig(executor=args.executor, world_size=args.world_size, preset=args.preset)
    rows = suite_rows(config, args.tasks.split(",") if args.tasks else None, args.split)
    path = write_parquet(rows, VERL_SCHEMA, args.out)
    print(f"{len(rows)} rows -> {path}")
    return path


if __name__ == "__main__":
    main()
