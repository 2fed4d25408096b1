"""`EpisodeRecorder`: the one way rows get into a dataset, from wherever the records are (docs/data.md, "Recording").

    recorder = EpisodeRecorder("episodes/", agent="my-model", seed=0)
    record = judge.open("all_reduce").judge(completion)          # here, or in a pool's actor
    recorder.record(record, completion, messages, config=judge.config, topology=judge.info.topology)
    recorder.close()

It needs nothing but what a record carries and what the caller knows (the prompt it sent, the completion,
the judge config, the episode and turn): no JudgeService in the same process, so a driver that receives
EvaluationRecords from a pool of judges (`EvaluationRecord.from_dict`) records exactly what a local judge
would. Three callers use it here: `JudgeService(recorder=...)` (every step the service judges),
`RecordEpisodes` (the Gymnasium wrapper: turns and episodes) and `evaluate(..., recorder=...)`.

Secrets: the judge already redacts every text of a record (pkb_env/redaction.py); the recorder redacts
the whole row once more with the secrets of its own process (the prompt and the completion were never in
the judge's hands, and a record may come from a judge on another machine).
"""
from __future__ import annotations

import os
import uuid
from typing import Any, Mapping, Protocol, Sequence

from pkb_env.config import JudgeConfig
from pkb_env.data.rows import Message, make_row, messages_of
from pkb_env.data.writer import DatasetWriter
from pkb_env.record import EvaluationRecord
from pkb_env.redaction import Redactor


class Recorder(Protocol):
    """What `JudgeService(recorder=...)` calls after every step it judges (EpisodeRecorder is one)."""

    def record(self, record: EvaluationRecord, completion: object,
               messages: Sequence[Message] | str | None = None, **meta: Any) -> None: ...


class EpisodeRecorder:
    """Record judged steps as rows of the dataset folder `path` (DatasetWriter: shards, card, dedupe).

    `agent` and `seed` are the defaults of every row (a call may pass its own); `reward` names the reward
    (configs/rewards/) applied to records recorded without one, as a single-turn episode would get it.
    """

    def __init__(self, path: str | os.PathLike, agent: str | None = None, seed: int | None = None,
                 reward: str = "default", run_id: str | None = None, **writer_options: Any):
        from pkb_env import __version__
        from pkb_env.rewards import load_reward

        self.writer = DatasetWriter(path, run_id=run_id, **writer_options)
        self.agent, self.seed = agent, seed
        self.reward_fn = load_reward(reward)
        self.redactor = Redactor.of_judge()
        self.version = __version__

    @property
    def path(self):
        return self.writer.path

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    def record(self, record: EvaluationRecord, completion: object, messages: Sequence[Message] | str | None = None,
               *, config: JudgeConfig | None = None, topology: str | None = None, turn: int = 0,
               episode_id: str | None = None, agent: str | None = None, seed: int | None = None,
               reward: float | None = None, reward_terms: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Add one step: `record` (as judged, or read back with EvaluationRecord.from_dict), the `completion`
        it judged, the chat `messages` that asked for it, and the step's place: the judge `config` (hashed),
        the `topology` config's name, `turn` and `episode_id` (a fresh one: the step is an episode of its own),
        `agent`, `seed`. `reward` and `reward_terms`: what the caller's reward gave (else the recorder's
        reward of the record). Returns the row as written (before any later duplicate raised its count)."""
        if reward is None:
            result = self.reward_fn(record)
            reward, reward_terms = result.value, result.terms
        if self.redactor:   # before anything is hashed or copied into the row
            record = self.redactor.redact(EvaluationRecord.from_dict(record.to_dict()))  # the caller's stays as it is
            completion = self.redactor.redact(completion if isinstance(completion, str) else repr(completion))
            messages = self.redactor.redact(messages_of(messages))
        row = make_row(record, completion, messages, reward=reward, reward_terms=reward_terms or {}, config=config,
                       topology=topology, turn=turn, episode_id=episode_id or uuid.uuid4().hex,
                       agent=agent if agent is not None else self.agent, seed=seed if seed is not None else self.seed,
                       run_id=self.run_id, version=self.version)
        row = self.redactor.redact(row)
        self.writer.add(row)
        return row

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "EpisodeRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
