"""Policies that produce actions for `ParallelKernelEnv` (installed as `pkb_env.agents`).

An agent maps an observation to an action string: `agent.act(obs) -> str`.
"""
from pkb_env.agents.base import Agent
from pkb_env.agents.files import FileAgent
from pkb_env.agents.reference import ReferenceAgent

__all__ = ["Agent", "FileAgent", "ReferenceAgent"]
