"""pkb-env as an OpenEnv environment: its Pydantic models and `PkbEnvClient` (docs/integrations.md,
examples/openenv/README.md). The server is `pkb-env serve` (pkb_env/entrypoints/openenv/server.py).

    pkb-env serve --port 8000 --executor cuda --world-size 8          # one judge, many sessions
    from pkb_env.entrypoints.openenv import PkbAction, PkbEnvClient
    async with PkbEnvClient(base_url="http://127.0.0.1:8000") as env:
        result = await env.reset(task="all_reduce")     # result.observation.prompt: the first turn's prompt
        result = await env.step(PkbAction(code=completion))
        result.reward, result.done, result.observation.verdict, result.observation.feedback
    with PkbEnvClient(base_url="http://127.0.0.1:8000").sync() as env:   # the same, blocking
        env.reset(task="all_gather"); env.step(PkbAction(code=completion))

The client is OpenEnv's `EnvClient` (openenv-core 0.3.0): one WebSocket per client, one server-side session
per WebSocket, each holding one episode at a time. An episode follows the Gymnasium env's rules
(pkb_env/episode.py): each step judges the completion and returns the turn's reward; it is done when a correct
completion reaches the server's target speedup (or is correct where speed is not measured) or after its
max turns. The observation after a step carries the next turn's prompt (the first one with the judge's
feedback on this attempt), so a client that keeps no chat can send `observation.prompt` as it is.
"""
from __future__ import annotations

from typing import Any

from pkb_env.extras import require

require("openenv.core", "openenv", "pkb_env.entrypoints.openenv (the OpenEnv server and PkbEnvClient)")

from openenv.core import EnvClient  # noqa: E402
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from pydantic import Field, field_validator  # noqa: E402
from pydantic_core import PydanticCustomError  # noqa: E402

ENV_NAME = "pkb_env"


class PkbAction(Action):
    """One attempt: the model's completion, as the Gymnasium env's step takes it."""

    code: str = Field(description="the model's completion: prose with a ```python block defining solution(...), "
                                  "or the bare module")

    @field_validator("code")
    @classmethod
    def _not_blank(cls, code: str) -> str:
        if not code.strip():   # a PydanticCustomError: OpenEnv sends the errors as JSON, a ValueError in them won't go
            raise PydanticCustomError("empty_code", "code is empty: send the model's completion (a ```python block defining solution, or "
                             "the bare module); the judge scores a completion without code as unparsable")
        return code


class PkbObservation(Observation):
    """What the model sees next, and what the judge made of the last attempt (reward and done: OpenEnv's own
    fields). After reset: the task's first prompt, no verdict."""

    task: str = Field("", description="the task's name")
    prompt: str = Field("", description="the next turn's prompt: the task, the reference, the machine and the "
                                        "judge's feedback on the last attempt")
    feedback: str = Field("", description="the judge's report on the last attempt ('' after reset)")
    verdict: str | None = Field(None, description="correct | wrong | runtime_error | build_error | unparsable | "
                                                  "flagged | judge_error; None after reset")
    correct: bool = False
    speedup: float | None = Field(None, description="reference time / candidate time; None where not measured")
    speedup_interval: list[float] | None = Field(None, description="its 90% interval from the step's paired bursts")
    roofline_fraction: float | None = Field(None, description="the cost model's bound / the measured time")
    reward_terms: dict[str, Any] = Field(default_factory=dict, description="every term of the reward")
    error: str | None = None
    turn: int = Field(0, description="attempts judged in this episode")
    max_turns: int = 0
    world_size: int = 0


class PkbState(State):
    """The session's episode: its task, turns, and best attempt so far (OpenEnv's `state`)."""

    task: str | None = None
    turn: int = 0
    max_turns: int = 0
    done: bool = False
    best_reward: float | None = None
    best_verdict: str | None = None
    best_speedup: float | None = None
    judge_errors: int = 0


class PkbEnvClient(EnvClient[PkbAction, PkbObservation, PkbState]):
    """A session on a `pkb-env serve` server (the module docstring). `message_timeout_s` is how long one reply
    may take: a step is judged in seconds on CPU ranks, longer on a busy server, whose steps queue on one judge."""

    def __init__(self, base_url: str, message_timeout_s: float = 900.0, **kwargs: Any):
        super().__init__(base_url, message_timeout_s=message_timeout_s, **kwargs)

    def _step_payload(self, action: PkbAction | str) -> dict[str, Any]:
        action = action if isinstance(action, PkbAction) else PkbAction(code=action)
        return {"code": action.code}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[PkbObservation]:
        observation = PkbObservation(**payload.get("observation", {}), done=payload.get("done", False),
                                     reward=payload.get("reward"))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> PkbState:
        return PkbState(**payload)


def server_reward(base_url: str):
    """A TRL `GRPOTrainer` reward function whose rewards come from a `pkb-env serve` server at `base_url`: each
    completion is one episode's first turn on its row's `task` (reset, then step), over one session per call.
    A completion with no text at all gets None (TRL leaves that sample out of this reward) rather than the
    server's refusal of empty code."""
    from pkb_env.agents.messages import completion_text

    def pkb_server(prompts: list, completions: list, task: list[str], **kwargs: Any) -> list[float | None]:
        rewards: list[float | None] = []
        with PkbEnvClient(base_url=base_url).sync() as env:
            for completion, name in zip(completions, task):
                text = completion_text(completion)
                if not text.strip():
                    rewards.append(None)
                    continue
                env.reset(task=name)
                rewards.append(env.step(PkbAction(code=text)).reward)
        return rewards

    return pkb_server
