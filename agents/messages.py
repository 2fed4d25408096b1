"""Observation -> chat messages -> prompt text, shared by the model-backed agents; a completion -> its text.

The env's `prompt` already holds everything for the turn (task, reference, hardware, rules, and the
judge's feedback on the previous attempt), so the user message is that text verbatim; the system message
only sets the model's role and the reply format the parser expects (one ```python block).

No import of transformers here: `render_prompt` takes any tokenizer-like object.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

SYSTEM_PROMPT = ("You are an expert in GPU programming, CUDA and torch.distributed. Your job: write a faster "
                 "multi-GPU implementation of the reference the user gives you, correct on every rank. "
                 "Reply with exactly one ```python fenced block holding the whole module that defines "
                 "`solution`; keep any explanation short and outside the block.")

Message = dict[str, str]


def build_messages(observation: dict[str, Any], system_prompt: str | None = SYSTEM_PROMPT) -> list[Message]:
    """[system, user] for one observation; the user message is `observation["prompt"]` verbatim.

    system_prompt=None (or "") leaves the system message out, for models trained without one.
    """
    try:
        prompt = observation["prompt"]
    except (KeyError, TypeError):
        raise ValueError("the observation has no 'prompt'; pass the observation dict that env.reset() or "
                         "env.step() returned") from None
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": prompt})
    return messages


def render_prompt(tokenizer: Any, messages: list[Message]) -> str:
    """The text to feed the model, ending where the assistant's reply starts.

    With a chat template (`tokenizer.chat_template`): the template, with the generation prompt added.
    A template that rejects the system role (some do) gets the system text prepended to the first user
    message instead. Without a template: "System: ...\\n\\nUser: ...\\n\\nAssistant:".
    """
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception:
            if not any(m["role"] == "system" for m in messages):
                raise
            return tokenizer.apply_chat_template(_fold_system(messages), tokenize=False,
                                                 add_generation_prompt=True)
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts + ["Assistant:"])


def _fold_system(messages: list[Message]) -> list[Message]:
    """The system text moved into the first user message, for templates without a system role."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    for m in rest:
        if m["role"] == "user":
            m["content"] = f"{system}\n\n{m['content']}"
            break
    return rest


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a str, or a conversational list of messages (assistant content joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        parts = []
        for message in completion:
            if not isinstance(message, Mapping) or "content" not in message:
                raise TypeError(f"a conversational completion must be a list of {{'role', 'content'}} dicts, got "
                                f"{type(message).__name__}: pass strings or TRL's message lists")
            if message.get("role", "assistant") == "assistant":
                content = message["content"]
                if isinstance(content, list):  # multimodal-style content blocks
                    content = "".join(block.get("text", "") for block in content if isinstance(block, Mapping))
                parts.append(content or "")
        return "\n".join(parts)
    raise TypeError(f"completion must be a str or a list of messages, got {type(completion).__name__}")
