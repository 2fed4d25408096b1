"""The OpenEnv server over the judge: what `pkb-env serve` runs (docs/integrations.md, examples/openenv/README.md).

One judge client (a LocalClient: its judge made, used and closed on a thread of its own) serves every session.
OpenEnv's `create_app` (openenv-core 0.3.0) makes one `PkbEnvironment` per WebSocket session and runs its
reset and step on a thread of that session's, so a step blocks that thread while the judge works and the
event loop stays free (`/health` answers during a step); steps of several sessions queue on the one judge,
whose timings must be the only work on its devices. A session holds one episode at a time:
`reset(task=NAME)` opens the task and starts an episode, `step(PkbAction(code=...))` judges the code,
`state` reports the episode. The settings (`ServeSettings`) bound the sessions at once (past them a
connection is refused with OpenEnv's CAPACITY_REACHED error naming the limit) and the bytes of a request
(HTTP bodies over it get 413; WebSocket messages over it close that connection with code 1009).

Bad requests get an error naming the fix and the server goes on: an unknown task (TaskError naming the closest of the
suite), an empty or missing `code`, wrong types and unknown fields (OpenEnv's VALIDATION_ERROR with
Pydantic's errors), a step before reset or after the episode ended, garbage JSON (INVALID_JSON). OpenEnv's
HTTP `POST /reset` and `/step` make a fresh environment per request (so `/step` has no episode and says to
use the WebSocket); errors there are 400s with the message.
"""
from __future__ import annotations

import functools
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pkb_env.client import JudgeClient, LocalClient
from pkb_env.config import JudgeConfig
from pkb_env.entrypoints.openenv.client import ENV_NAME, PkbAction, PkbObservation, PkbState
from pkb_env.episode import Episode
from pkb_env.extras import require
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import RewardFunction
from pkb_env.settings import reward_function

require("uvicorn", "openenv", "pkb-env serve (uvicorn, which OpenEnv's server runs on)")

from openenv.core.env_server import create_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402


@dataclass(frozen=True)
class ServeSettings:
    """The server's own settings (the judge's are its JudgeConfig)."""

    max_sessions: int = 4
    """WebSocket sessions at once; their steps queue on the one judge, so more sessions mean longer waits."""
    max_turns: int = 4
    target_speedup: float = 1.0
    reward: str = "default"
    max_request_bytes: int = 4 * JudgeConfig.max_action_chars + (64 << 10)
    """An HTTP body or WebSocket message over this is refused unread (an action's code is at most
    JudgeConfig.max_action_chars characters, 4 bytes each at most in UTF-8; the rest is JSON)."""

    def check(self) -> None:
        for name in ("max_sessions", "max_turns", "max_request_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


class PkbEnvironment(Environment[PkbAction, PkbObservation, PkbState]):
    """One OpenEnv session: one episode at a time over the server's shared judge (the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True   # sessions share nothing but the judge, whose calls queue

    def __init__(self, client: JudgeClient, settings: ServeSettings, reward_fn: RewardFunction):
        super().__init__()
        self.client, self.settings, self.reward_fn = client, settings, reward_fn
        self.episode: Episode | None = None
        self._state = PkbState(max_turns=settings.max_turns)
        self._best: tuple[float, str, float | None] | None = None   # (reward, verdict, speedup) of the best turn

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: Any = None,
              **kwargs: Any) -> PkbObservation:
        """Start an episode on `task`. `seed` is accepted and unused: the judge draws each step's inputs itself."""
        if kwargs:
            raise ValueError(f"unknown reset argument(s) {', '.join(sorted(kwargs))}: reset takes task (and "
                             f"OpenEnv's seed and episode_id)")
        if not isinstance(task, str) or not task.strip():
            raise ValueError(f"reset needs task=NAME (a task of the suite: `pkb-env tasks` lists them), got {task!r}")
        episode = Episode(self.client, task, self.reward_fn, self.settings.max_turns, self.settings.target_speedup,
                          where="pkb-env serve")   # TaskError naming the closest tasks
        self.episode, self._best = episode, None
        self._state = PkbState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, task=episode.task,
                               max_turns=episode.max_turns)
        return self._observation(episode.observation()["prompt"], reward=None, done=False)

    def step(self, action: PkbAction, timeout_s: float | None = None, **kwargs: Any) -> PkbObservation:
        """Judge `action.code` as the episode's next turn. `timeout_s` is accepted and unused: the judge's own
        deadlines (JudgeConfig: trial, build and step budgets) bound every step."""
        episode = self.episode
        if episode is None:
            raise RuntimeError("no episode in this session: call reset(task=NAME) first. (OpenEnv's HTTP POST /step "
                               "makes a fresh environment per request, which has none: use the WebSocket /ws, as "
                               "PkbEnvClient does)")
        turn = episode.step(action.code)   # raises, naming the fix, once the episode is over
        record, done = turn.record, episode.over
        if self._best is None or turn.reward > self._best[0]:
            self._best = (turn.reward, record.verdict.value, record.speedup)
        best_reward, best_verdict, _ = self._best
        self._state = self._state.model_copy(update={
            "step_count": episode.turns, "turn": episode.turns, "done": done, "best_reward": best_reward,
            "best_verdict": best_verdict, "best_speedup": episode.best_speedup, "judge_errors": episode.judge_errors})
        prompt = "" if done else episode.observation(record.feedback)["prompt"]
        return self._observation(prompt, reward=turn.reward, done=done, record=record,
                                 terms=turn.info["reward_terms"])

    @property
    def state(self) -> PkbState:
        return self._state

    def _observation(self, prompt: str, reward: float | None, done: bool, record: EvaluationRecord | None = None,
                     terms: dict | None = None) -> PkbObservation:
        episode = self.episode
        fields: dict[str, Any] = {}
        if record is not None:
            interval = record.speedup_interval
            fields = {"feedback": record.feedback, "verdict": record.verdict.value, "correct": record.correct,
                      "speedup": record.speedup, "speedup_interval": list(interval) if interval else None,
                      "roofline_fraction": record.roofline_fraction, "reward_terms": terms or {},
                      "error": record.error}
        return PkbObservation(task=episode.task, prompt=prompt, turn=episode.turns, max_turns=episode.max_turns,
                              world_size=self.client.config.world_size, reward=reward, done=done, **fields)


class BodyLimit:
    """Refuse an HTTP request whose body is over `limit` bytes (413) or of unknown length (411), unread."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            problem = None
            if length is None and b"chunked" in headers.get(b"transfer-encoding", b""):
                problem = (411, "send the body with a Content-Length (chunked bodies are refused)")
            elif length is not None and (not length.isdigit() or int(length) > self.limit):
                problem = (413, f"the body is {length.decode(errors='replace')} bytes; the limit is {self.limit:,} "
                                f"(an action's code is at most {JudgeConfig.max_action_chars:,} characters)")
            if problem:
                from starlette.responses import JSONResponse

                await JSONResponse({"detail": problem[1]}, status_code=problem[0])(scope, receive, send)
                return
        await self.app(scope, receive, send)


class QuietClose:
    """Close a WebSocket quietly when the client has gone first: a normal client close could log "ERROR:
    Exception in ASGI application" and a traceback (one close in three, here). OpenEnv 0.3.0's client sends a
    close message and closes its socket at once; the server's endpoint then closes the socket in a `finally` and
    catches only RuntimeError, while Starlette raises WebSocketDisconnect for a close frame sent to a peer that
    has gone meanwhile. Closing a closed connection is nothing to do: the close is
    dropped once the client's disconnect was received, or where sending it finds the peer gone (OSError, which
    uvicorn's ClientDisconnected is). Every other message goes through as it was. The end of each session is
    logged beside uvicorn's "connection open" (its sans-I/O WebSocket protocol logs no close)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        gone = False

        async def receiving():
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "websocket.disconnect"
            return message

        async def sending(message):
            if message["type"] != "websocket.close":
                await send(message)
            elif not gone:
                try:
                    await send(message)
                except OSError:   # the peer went while the server was closing: it is closed
                    pass

        await self.app(scope, receiving, sending)
        logging.getLogger("uvicorn.error").info("connection closed")


def make_app(client: JudgeClient, settings: ServeSettings):
    """OpenEnv's app over `client`: sessions of PkbEnvironment, errors as 400s, bodies bounded; the client is
    closed at the app's shutdown."""
    from starlette.responses import JSONResponse

    settings.check()
    reward_fn = reward_function(settings.reward, "pkb-env serve --reward")
    factory = functools.partial(PkbEnvironment, client, settings, reward_fn)
    app = create_app(factory, PkbAction, PkbObservation, env_name=ENV_NAME, max_concurrent_envs=settings.max_sessions)

    async def refused(request, exc: Exception):
        return JSONResponse({"detail": f"{type(exc).__name__}: {exc}"}, status_code=400)

    app.add_exception_handler(ValueError, refused)     # TaskError, bad reset arguments
    app.add_exception_handler(RuntimeError, refused)   # no episode, episode over
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes)
    app.add_middleware(QuietClose)
    app.router.on_shutdown.append(client.close)
    return app


def serve(config: JudgeConfig, settings: ServeSettings, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "info") -> None:
    """Run the server until SIGINT or SIGTERM; the judge's processes stop before it returns (or raises)."""
    import uvicorn

    client = LocalClient(config)
    try:
        app = make_app(client, settings)
        client.run(lambda service: service.prestart())   # the rank processes start: the first step need not wait
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                               ws_max_size=settings.max_request_bytes, timeout_graceful_shutdown=5))
        server.run()
    finally:
        client.close()


def app_from_environment():
    """The app for `uvicorn --factory pkb_env.entrypoints.openenv.server:app_from_environment` (openenv.yaml's
    `app`): the judge settings from the YAML file named by PKB_ENV_SERVE_CONFIG (JudgeConfig's fields, and
    ServeSettings' under `serve:`), else the defaults. `pkb-env serve` is the usual way in."""
    import yaml

    path = os.environ.get("PKB_ENV_SERVE_CONFIG")
    values = dict(yaml.safe_load(Path(path).read_text()) or {}) if path else {}
    serve_values = values.pop("serve", None) or {}
    client = LocalClient(JudgeConfig.from_mapping(values))
    client.run(lambda service: service.prestart())
    return make_app(client, ServeSettings(**serve_values))
