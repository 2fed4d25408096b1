"""Policies that produce actions for `ParallelKernelEnv` (installed as `pkb_env.agents`).

An agent maps an observation to an action string: `agent.act(obs) -> str`.

Model-backed agents load on first use, so importing this package never imports transformers:
  TransformersAgent  a Hugging Face causal LM (pkb_env.agents.transformers_agent; needs `pip install 'pkb-env[llm]'`)
  OpenAIAgent        an OpenAI-compatible chat-completions server (pkb_env.agents.openai_agent; standard library)
"""
from importlib import import_module

from pkb_env.agents.base import Agent
from pkb_env.agents.files import FileAgent, PkbFileAgent
from pkb_env.agents.messages import SYSTEM_PROMPT, build_messages, render_prompt
from pkb_env.agents.reference import ReferenceAgent

_LAZY = {"TransformersAgent": "pkb_env.agents.transformers_agent",
         "OpenAIAgent": "pkb_env.agents.openai_agent",
         "OpenAIAgentError": "pkb_env.agents.openai_agent"}

__all__ = ["Agent", "FileAgent", "PkbFileAgent", "ReferenceAgent", "SYSTEM_PROMPT", "build_messages", "render_prompt",
           *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
