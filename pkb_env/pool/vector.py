"""`RayVectorEnv`: a Gymnasium VectorEnv whose sub-envs are Ray actors, each a whole ParallelKernelEnv.

    from pkb_env.pool import RayVectorEnv
    envs = RayVectorEnv(4, task="all_reduce", config=JudgeConfig(executor="cpu", world_size=2), address="local")
    obs, infos = envs.reset(seed=0)
    obs, rewards, terminations, truncations, infos = envs.step(actions)   # the 4 steps judged at once
    envs.close()

Unlike `gymnasium.make_vec`'s sync and async modes (which this package leaves as they are, so that they need
no Ray), the sub-envs run where Ray places them (pkb_env/pool/placement.py: their own devices, across
nodes), so their timings do not interfere.

Autoreset is Gymnasium 1.x's default, NEXT_STEP: the step after a sub-env terminated or truncated resets it
(its action ignored; reward 0, terminated and truncated False). A sub-env whose actor died under a step, or
whose step outran `step_timeout_s` (its actor then killed), returns truncated with reward 0 and
`info["judge_error"]` saying why (never the candidate's fault); Ray restarts the actor and the next step resets
it. The per-step info is the env's (ParallelKernelEnv.step), the record as a dict, in Gymnasium's vector form
(each key an array, `_key` its mask).
"""
from __future__ import annotations

from copy import deepcopy
from typing import Any, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from pkb_env import spaces as S
from pkb_env.config import JudgeConfig
from pkb_env.pool.actors import EnvActor
from pkb_env.pool.cluster import ray_module
from pkb_env.pool.fleet import Fleet, step_timeout


class RayVectorEnv(VectorEnv):
    """`num_envs` ParallelKernelEnvs on Ray actors (the module docstring). `env_kwargs` are the env's own
    (task, max_turns, target_speedup, reward, turn_credit, world_size, executor, preset, dtype)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, config: JudgeConfig | None = None, address: str = "auto",
                 cpus_per_actor: float | None = None, step_timeout_s: float | None = None, max_restarts: int = 3,
                 start_timeout_s: float = 300.0, copy: bool = True, **env_kwargs: Any):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        shorthands = {k: env_kwargs.pop(k) for k in ("world_size", "executor", "preset", "dtype") if k in env_kwargs}
        config = (config or JudgeConfig()).replace(**{k: v for k, v in shorthands.items() if v is not None})
        self.step_timeout_s = step_timeout(config, step_timeout_s)
        self.num_envs, self.copy = num_envs, copy
        self._fleet = None
        self._fleet = Fleet(config, address, num_envs, cpus_per_actor, max_restarts, start_timeout_s)
        self.config = self._fleet.config
        try:
            self._fleet.start(EnvActor, lambda index: ({**env_kwargs, "config": self.config},))
        except BaseException:
            self.close()
            raise
        max_turns = env_kwargs.get("max_turns", 4)
        self.single_observation_space = S.observation_space(max_turns)
        self.single_action_space = S.action_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._observations = create_empty_array(self.single_observation_space, num_envs)
        self._env_obs: list[Any] = [None] * num_envs
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)
        self._lost = np.zeros(num_envs, dtype=np.bool_)   # its actor died: reset it whatever the step asks

    @property
    def actors(self) -> list[Any]:
        return list(self._fleet.handles)

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        seeds = _seeds(seed, self.num_envs)
        refs = [handle.reset.remote(s, options) for handle, s in zip(self._fleet.handles, seeds)]
        infos: dict[str, Any] = {}
        for i, answer in enumerate(self._gather(refs)):
            if isinstance(answer, str):
                raise RuntimeError(f"sub-env {i} could not reset: {answer}")
            self._env_obs[i], info = answer
            infos = self._add_info(infos, info, i)
        self._autoreset[:] = False
        self._lost[:] = False
        return self._batched(), infos

    def step(self, actions):
        actions = list(iterate(self.action_space, actions))
        if len(actions) != self.num_envs:
            raise ValueError(f"step takes one action per sub-env: {self.num_envs} expected, got {len(actions)}")
        resetting = self._autoreset | self._lost
        refs = [handle.reset.remote(None, None) if resetting[i] else handle.step.remote(actions[i])
                for i, handle in enumerate(self._fleet.handles)]
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        self._lost[:] = False
        for i, answer in enumerate(self._gather(refs)):
            if isinstance(answer, str):   # the judge's failure: this episode ends, the next step resets it
                truncations[i], self._lost[i] = True, True
                info = {"judge_error": answer}
            elif resetting[i]:
                self._env_obs[i], info = answer
            else:
                self._env_obs[i], rewards[i], terminations[i], truncations[i], info = answer
            infos = self._add_info(infos, info, i)
        self._autoreset = terminations | truncations
        return self._batched(), rewards, terminations, truncations, infos

    def _gather(self, refs: list[Any]) -> list[Any]:
        """Each answer, or why there is none (a str): a dead actor, an error, or no answer within the step timeout
        (that actor is killed, and Ray restarts it)."""
        ray = ray_module()
        ready, late = ray.wait(refs, num_returns=len(refs), timeout=self.step_timeout_s)
        answers = []
        for i, ref in enumerate(refs):
            if ref in late:
                ray.kill(self._fleet.handles[i], no_restart=False)
                answers.append(f"the sub-env's judge did not answer within step_timeout_s = {self.step_timeout_s:g} s "
                               f"and was restarted")
                continue
            try:
                answers.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                answers.append(f"the sub-env's actor died ({str(exc).strip().splitlines()[0][:200]}); Ray restarts it")
            except ray.exceptions.RayTaskError as exc:
                cause = getattr(exc, "cause", None) or exc
                answers.append(f"the judge raised {type(cause).__name__}: {str(cause).strip().splitlines()[-1][:300]}")
        return answers

    def _batched(self):
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return deepcopy(self._observations) if self.copy else self._observations

    def health(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        return self._fleet.health(timeout_s)

    def process_ids(self) -> dict[str, list[int]]:
        return self._fleet.process_ids()

    def close_extras(self, **kwargs: Any) -> None:
        if self._fleet is not None:
            self._fleet.close()
            self._fleet = None


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

