"""`RayVectorEnv`: a Gymnasium VectorEnv of `num_envs` episodes judged together on a Ray pool of judges.

    from pkb_env.entrypoints.gym import RayVectorEnv
    envs = RayVectorEnv(4, task="all_reduce", config=JudgeConfig(executor="cpu", world_size=2), address="local")
    obs, infos = envs.reset(seed=0)
    obs, rewards, terminations, truncations, infos = envs.step(actions)   # the 4 steps judged at once
    envs.close()

Each sub-env is an Episode (pkb_env/episode.py: the Gymnasium env's rules) over one JudgePool (pkb_env/pool/):
a step submits every sub-env's action to the pool at once, so the steps run in parallel on the pool's actors,
which Ray places on their own devices and nodes (their timings do not interfere). Unlike `gymnasium.make_vec`'s
sync and async modes (which this package leaves as they are, so that they need no Ray), nothing of an episode
lives in an actor: an actor judges steps, whichever sub-env they come from. `pool=` shares an existing pool.

Autoreset is Gymnasium 1.x's default, NEXT_STEP: the step after a sub-env terminated or truncated resets it
(its action ignored; reward 0, terminated and truncated False). A step the pool could not judge (an actor died
under it, or it outran the pool's step timeout: the pool retries, then gives up) ends that sub-env's episode
truncated with reward 0 and `info["judge_error"]` saying why (never the candidate's fault); the next step
resets it. The per-step info is the env's (ParallelKernelEnv.step), the record as a dict, in Gymnasium's
vector form (each key an array, `_key` its mask).
"""
from __future__ import annotations

from copy import deepcopy
from typing import Any, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from pkb_env import spaces as S
from pkb_env.config import JudgeConfig
from pkb_env.episode import Episode, task_pool
from pkb_env.pool import JudgePool
from pkb_env.rewards import load_reward


class RayVectorEnv(VectorEnv):
    """`num_envs` episodes over one JudgePool (the module docstring).

    Episode settings: task (a name, a list to draw from at each reset, or None for the suite as the pool runs
    it), max_turns, target_speedup, reward, turn_credit. The pool: `pool` (shared; the env leaves it open), else
    one made here from `config` (and the shorthands world_size, executor, preset, dtype) at `address`, with
    `num_envs` actors unless `actors` says otherwise, and the pool's own settings (cpus_per_actor,
    step_timeout_s, max_restarts, start_timeout_s).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, task: str | Sequence[str] | None = "all_reduce", max_turns: int = 4,
                 target_speedup: float = 1.0, reward: str = "default", turn_credit: str = "turn",
                 config: JudgeConfig | None = None, address: str = "auto", pool: JudgePool | None = None,
                 actors: int | None = None, copy: bool = True, **settings: Any):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        shorthands = {k: settings.pop(k) for k in ("world_size", "executor", "preset", "dtype") if k in settings}
        self.num_envs, self.copy = num_envs, copy
        self.max_turns, self.target_speedup, self.turn_credit = max_turns, target_speedup, turn_credit
        self.reward_fn = load_reward(reward)
        self._own_pool = pool is None
        if pool is None:
            config = (config or JudgeConfig()).replace(**{k: v for k, v in shorthands.items() if v is not None})
            pool = JudgePool(config, address=address, actors=actors or num_envs, **settings)
        elif config is not None or shorthands or settings:
            raise ValueError("pass either pool or the settings to make one (config, its shorthands, the pool's "
                             "own): a shared pool judges with its own config (pool.config)")
        self.pool = pool
        try:
            self.task_pool = task_pool(self.pool, task)
        except BaseException:
            self.close()
            raise
        self.single_observation_space = S.observation_space(max_turns)
        self.single_action_space = S.action_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._observations = create_empty_array(self.single_observation_space, num_envs)
        self._episodes: list[Episode | None] = [None] * num_envs
        self._env_obs: list[Any] = [None] * num_envs
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)

    @property
    def config(self) -> JudgeConfig:
        return self.pool.config

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        task = options.pop("task", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; the only option is 'task'")
        super().reset(seed=seed if isinstance(seed, (int, np.integer)) or seed is None else None)
        draws = _seeds(seed, self.num_envs)
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            infos = self._add_info(infos, self._reset_one(i, task, draws[i]), i)
        self._autoreset[:] = False
        return self._batched(), infos

    def _reset_one(self, i: int, task: str | None, seed: int | None) -> dict[str, Any]:
        if task is None:
            rng = np.random.default_rng(seed) if seed is not None else self.np_random
            task = self.task_pool[int(rng.integers(len(self.task_pool)))]
        episode = Episode(self.pool, task, self.reward_fn, self.max_turns, self.target_speedup, self.turn_credit)
        self._episodes[i] = episode
        self._env_obs[i] = episode.observation()
        return {"task": task, "world_size": self.config.world_size, "executor": self.pool.info.name}

    def step(self, actions):
        actions = list(iterate(self.action_space, actions))
        if len(actions) != self.num_envs:
            raise ValueError(f"step takes one action per sub-env: {self.num_envs} expected, got {len(actions)}")
        if any(e is None for e in self._episodes):
            raise RuntimeError("step() called before reset(); call envs.reset() first")
        resetting = self._autoreset.copy()
        futures = {i: self._episodes[i].submit(actions[i]) for i in range(self.num_envs) if not resetting[i]}
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            if resetting[i]:
                info = self._reset_one(i, None, None)
            else:
                episode = self._episodes[i]
                turn = episode.take(futures[i].result())
                info = {**turn.info, "record": turn.record.to_dict()}   # plain data, as across a wire
                rewards[i], terminations[i], truncations[i] = turn.reward, turn.terminated, turn.truncated
                if not turn.record.judged:   # the judge's failure: this episode ends, the next step resets it
                    rewards[i], truncations[i], info["judge_error"] = 0.0, True, turn.record.error
                self._env_obs[i] = episode.observation(turn.record.feedback)
            infos = self._add_info(infos, info, i)
        self._autoreset = terminations | truncations
        return self._batched(), rewards, terminations, truncations, infos

    def _batched(self):
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return deepcopy(self._observations) if self.copy else self._observations

    def close_extras(self, **kwargs: Any) -> None:
        pool, self.pool = getattr(self, "pool", None), None
        if pool is not None and self._own_pool:
            pool.close()


def _seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Gymnasium's convention: one int seeds sub-env i with seed + i; a list gives each its own."""
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(n)]
    seeds = list(seed)
    if len(seeds) != n:
        raise ValueError(f"reset takes one seed or {n} seeds, got {len(seeds)}")
    return seeds
