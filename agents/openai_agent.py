"""A policy served by an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted APIs).

    export PKB_OPENAI_BASE_URL=http://localhost:8000/v1  PKB_OPENAI_MODEL=my-model  OPENAI_API_KEY=EMPTY
    agent = OpenAIAgent()
    action = agent.act(obs)
    groups = agent.act_batch(observations, num_samples=8)   # one request per observation, n=8

Plain standard library (urllib): no client package to install. The API key goes only into the
Authorization header; it is never logged, shown in repr(), or echoed in error messages.
"""
from __future__ import annotations

import json
import logging
import os
import random
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from pkb_env.agents.messages import SYSTEM_PROMPT, build_messages

log = logging.getLogger(__name__)

BODY_CHARS = 300  # of a failed response's body, in error messages
MAX_RETRY_WAIT_S = 60.0


class OpenAIAgentError(RuntimeError):
    """The endpoint failed or answered something that is not a chat completion."""


class OpenAIAgent:
    """Samples completions from `model` at `base_url` (the API root, ending in /v1 for most servers).

    base_url, model, api_key: from the arguments, else from PKB_OPENAI_BASE_URL (or OPENAI_BASE_URL),
    PKB_OPENAI_MODEL and OPENAI_API_KEY. temperature, top_p, max_tokens: sampling settings sent with each
    request. timeout: seconds per HTTP request. retries: extra attempts after HTTP 429 or 5xx, waiting
    backoff_s * 2**attempt (or the server's Retry-After) in between; other failures raise at once.
    concurrency: requests in flight at once in act_batch. system_prompt: the system message (None: none).
    extra_body: more fields for the request body (e.g. {"seed": 0} or vLLM's {"top_k": 20}).
    """

    name = "openai"

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 temperature: float = 0.8, top_p: float = 0.95, max_tokens: int = 4096, timeout: float = 120.0,
                 retries: int = 2, backoff_s: float = 1.0, concurrency: int = 8,
                 system_prompt: str | None = SYSTEM_PROMPT, extra_body: dict[str, Any] | None = None):
        base_url = base_url or os.environ.get("PKB_OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        model = model or os.environ.get("PKB_OPENAI_MODEL")
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not base_url:
            raise ValueError("no endpoint configured: pass base_url=... or set PKB_OPENAI_BASE_URL (or "
                             "OPENAI_BASE_URL), e.g. http://localhost:8000/v1")
        if not model:
            raise ValueError("no model configured: pass model=... or set PKB_OPENAI_MODEL to the served "
                             "model's name")
        if not api_key:
            raise ValueError("no API key configured: pass api_key=... or set OPENAI_API_KEY (any value, e.g. "
                             "EMPTY, for a local server that checks none)")
        if retries < 0 or timeout <= 0 or concurrency < 1:
            raise ValueError(f"need retries >= 0, timeout > 0 and concurrency >= 1; got retries={retries}, "
                             f"timeout={timeout}, concurrency={concurrency}")
        self.base_url, self.model = base_url.rstrip("/"), model
        self._api_key = api_key
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.timeout, self.retries, self.backoff_s, self.concurrency = timeout, retries, backoff_s, concurrency
        self.system_prompt = system_prompt
        self.extra_body = dict(extra_body or {})

    def __repr__(self) -> str:
        return f"OpenAIAgent(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    # -- policy ----------------------------------------------------------------------------------
    def act(self, observation: dict[str, Any]) -> str:
        return self.act_batch([observation], num_samples=1)[0][0]

    def act_batch(self, observations: Sequence[dict[str, Any]], num_samples: int = 1) -> list[list[str]]:
        """`num_samples` completions for each observation (one request per observation with n=num_samples):
        result[i][j] is sample j for observations[i]."""
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        if len(observations) <= 1 or self.concurrency == 1:
            return [self.complete(build_messages(obs, self.system_prompt), num_samples) for obs in observations]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(observations))) as pool:
            return list(pool.map(lambda obs: self.complete(build_messages(obs, self.system_prompt), num_samples),
                                 observations))

    def complete(self, messages: list[dict[str, str]], n: int = 1) -> list[str]:
        """`n` completions of `messages`. A server that returns fewer choices than asked (some ignore n)
        is asked again for the rest."""
        texts: list[str] = []
        while len(texts) < n:
            body = {"model": self.model, "messages": messages, "n": n - len(texts),
                    "temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                    **self.extra_body}
            got = _choices(self._post(body), self.url)
            if not got:
                raise OpenAIAgentError(f"POST {self.url} returned no choices; check that model "
                                       f"{self.model!r} is served there")
            texts.extend(got)
        return texts[:n]

    # -- HTTP ------------------------------------------------------------------------------------
    def _post(self, body: dict[str, Any]) -> Any:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Authorization": f"Bearer {self._api_key}"}
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                text = self._redact(_read_error_body(exc))
                retryable = exc.code == 429 or exc.code >= 500
                if retryable and attempt < self.retries:
                    wait = self._wait_s(attempt, exc.headers.get("Retry-After") if exc.headers else None)
                    log.warning("POST %s: HTTP %d, retrying in %.1fs (attempt %d of %d)", self.url, exc.code,
                                wait, attempt + 1, self.retries)
                    time.sleep(wait)
                    continue
                hint = {401: "check OPENAI_API_KEY", 403: "check OPENAI_API_KEY and its permissions",
                        404: f"check the base URL (usually ends in /v1) and the model name {self.model!r}"}
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise OpenAIAgentError(f"POST {self.url} failed{tries}: HTTP {exc.code} {exc.reason}: "
                                       f"{text[:BODY_CHARS]!r}" +
                                       (f"; {hint[exc.code]}" if exc.code in hint else "")) from None
            except (TimeoutError, socket.timeout):
                raise self._timeout_error() from None
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                    raise self._timeout_error() from None
                raise OpenAIAgentError(f"POST {self.url} failed: {exc.reason}; check that the server is "
                                       f"running and the base URL is right") from None
            try:
                return json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                text = self._redact(raw.decode("utf-8", errors="replace"))
                raise OpenAIAgentError(f"POST {self.url} returned a body that is not JSON: "
                                       f"{text[:BODY_CHARS]!r}; is the base URL an OpenAI-compatible API "
                                       f"root (usually ending in /v1)?") from None
        raise AssertionError("unreachable")

    def _wait_s(self, attempt: int, retry_after: str | None) -> float:
        try:
            if retry_after is not None:
                return min(max(float(retry_after), 0.0), MAX_RETRY_WAIT_S)
        except ValueError:
            pass  # an HTTP date: use the backoff
        return min(self.backoff_s * 2 ** attempt * (1 + 0.1 * random.random()), MAX_RETRY_WAIT_S)

    def _timeout_error(self) -> OpenAIAgentError:
        return OpenAIAgentError(f"POST {self.url} timed out after {self.timeout:g}s; raise timeout=... or "
                                f"lower max_tokens={self.max_tokens}")

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def _read_error_body(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode("utf-8", errors="replace")
    except Exception:  # the connection broke while reading the error body
        return ""


def _choices(payload: Any, url: str) -> list[str]:
    """The completion texts of a chat-completions response, in choice-index order."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list):
        error = payload.get("error") if isinstance(payload, dict) else None
        detail = f"error {error!r}" if error else f"{json.dumps(payload)[:BODY_CHARS]!r}"
        raise OpenAIAgentError(f"POST {url} returned no 'choices' list: {detail}; the endpoint must speak the "
                               f"OpenAI chat-completions format")
    try:
        ordered = sorted(choices, key=lambda c: c.get("index", 0))
        return [c["message"].get("content") or "" for c in ordered]
    except (AttributeError, KeyError, TypeError):
        raise OpenAIAgentError(f"POST {url} returned choices without a message: "
                               f"{json.dumps(choices)[:BODY_CHARS]!r}") from None
