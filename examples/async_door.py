"""A new door in one page: multi-turn episodes driven from asyncio, every one over one judge client.

A newcomer's door needs nothing of the judge but pkb_env/client.py (where the judge runs) and pkb_env/episode.py
(the rules of an episode). This one plays `--episodes` episodes concurrently on an event loop; each replays a
folder's files as its turns (a stand-in for a model served behind an async API), and the loop stays free while
the judge works. Run on CPU ranks:

    python examples/async_door.py all_reduce my_attempts/ --episodes 2 --world-size 2 --executor cpu

`--ray ADDRESS` judges on a Ray pool instead: nothing else changes, since a JudgePool is a JudgeClient too.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from pkb_env import JudgeConfig
from pkb_env.client import JudgeClient, LocalClient
from pkb_env.episode import Episode


async def play(client: JudgeClient, task: str, attempts: list[str], max_turns: int) -> dict:
    """One episode: each attempt is a turn until the episode ends (solved, or out of turns)."""
    episode = await asyncio.to_thread(Episode, client, task, max_turns=max_turns)   # checks the task: TaskError
    await asyncio.to_thread(episode.observation)        # turn 0: the judge made ready (a model would read it)
    verdicts = []
    for code in attempts:
        turn = await episode.astep(code)               # the loop stays free while the judge works
        verdicts.append(turn.record.verdict.value)
        if episode.over:
            break
    return {"verdicts": verdicts, **episode.metrics()}


async def run(client: JudgeClient, task: str, attempts: list[str], episodes: int, max_turns: int) -> list[dict]:
    return await asyncio.gather(*(play(client, task, attempts, max_turns) for _ in range(episodes)))


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("task", help="task name (`pkb-env tasks`)")
    p.add_argument("attempts", type=Path, help="a folder of .py files, replayed in name order as each episode's turns")
    p.add_argument("--episodes", type=int, default=2)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--executor", default="auto")
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="judge on a JudgePool at this Ray address")
    args = p.parse_args(argv)
    attempts = [f.read_text() for f in sorted(args.attempts.glob("*.py"))]
    if not attempts:
        p.error(f"{args.attempts} holds no .py file: put each turn's attempt in one")
    config = JudgeConfig(executor=args.executor, world_size=args.world_size)
    if args.ray:
        from pkb_env.pool import JudgePool

        client = JudgePool(config, address=args.ray)
    else:
        client = LocalClient(config)
    with client:
        results = asyncio.run(run(client, args.task, attempts, args.episodes, args.max_turns))
    for result in results:
        print(json.dumps(result))
    return results


if __name__ == "__main__":
    main()
