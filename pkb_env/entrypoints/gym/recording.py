"""`RecordEpisodes`: a Gymnasium wrapper that records every judged step of a pkb-env env as a dataset row.

    env = RecordEpisodes(gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce"), "episodes/",
                         agent="my-model")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(completion)   # one row, on disk when step returns
    env.close()

Named after Gymnasium's own `RecordEpisodeStatistics`. A row's prompt is the chat the agent was shown for
that turn (pkb_env.agents.build_messages of the observation: the system prompt and the turn's prompt,
feedback included), its reward the one the env returned (turn credit applied) with the reward's terms,
its turn and episode id the wrapper's count, its seed the one given to `reset` (None: none given).
"""
from __future__ import annotations

import os
import uuid
from typing import Any

import gymnasium

from pkb_env.data.recorder import EpisodeRecorder


class RecordEpisodes(gymnasium.Wrapper):
    """Record each step of `env` (a ParallelKernelEnv, possibly wrapped) into the dataset folder `path`.

    `agent`: the name stored in each row; `system_prompt`: the system message of the recorded prompt
    (default: pkb_env.agents.SYSTEM_PROMPT, what the model-backed agents send; None leaves it out).
    `recorder`: an EpisodeRecorder to share (several envs, one run); else one is made for `path`.
    """

    def __init__(self, env: gymnasium.Env, path: str | os.PathLike | None = None, agent: str | None = None,
                 system_prompt: str | None = "default", recorder: EpisodeRecorder | None = None):
        super().__init__(env)
        from pkb_env.agents import SYSTEM_PROMPT
        from pkb_env.entrypoints.gym.env import ParallelKernelEnv

        if not isinstance(env.unwrapped, ParallelKernelEnv):
            raise TypeError(f"RecordEpisodes wraps a ParallelKernelEnv, got {type(env.unwrapped).__name__}; create "
                            f"the env with gymnasium.make('pkb_env/ParallelKernel-v0', ...)")
        if (path is None) == (recorder is None):
            raise ValueError("pass exactly one of path (a dataset folder) and recorder (an EpisodeRecorder)")
        self.recorder = recorder or EpisodeRecorder(path, agent=agent)
        self._owns_recorder = recorder is None
        self.agent = agent
        self.system_prompt = SYSTEM_PROMPT if system_prompt == "default" else system_prompt
        self.episode_id: str | None = None
        self._seed: int | None = None
        self._turn = 0
        self._obs: dict[str, Any] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode_id, self._seed, self._turn, self._obs = uuid.uuid4().hex, seed, 0, obs
        return obs, info

    def step(self, action: str):
        from pkb_env.agents import build_messages

        if self._obs is None:
            raise RuntimeError("step() called before reset(); call env.reset() to start an episode")
        messages = build_messages(self._obs, self.system_prompt)
        obs, reward, terminated, truncated, info = self.env.step(action)
        client = self.env.unwrapped.client
        self.recorder.record(info["record"], action, messages, config=client.config, topology=client.info.topology,
                             turn=self._turn, episode_id=self.episode_id, agent=self.agent, seed=self._seed,
                             reward=float(reward), reward_terms=info.get("reward_terms") or {})
        self._turn += 1
        self._obs = obs
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        try:
            if self._owns_recorder:
                self.recorder.close()
        finally:
            super().close()
