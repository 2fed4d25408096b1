"""Agents named on a command line (`pkb-env evaluate --agent SPEC`), checked without importing torch or transformers.

    reference        the task's own reference (the speedup-1 baseline)
    files:DIR        one <task>.py per task in DIR
    pkb:DIR          PKB-format files in DIR (<N>_<problem>_<backend>.py), judged through each task's PKB mapping
                     (JudgeConfig(pkb=True), docs/pkb_compat.md)
    openai:MODEL     MODEL on an OpenAI-compatible server (vLLM, SGLang, a hosted API): base URL from base_url,
                     else PKB_OPENAI_BASE_URL or OPENAI_BASE_URL; key from OPENAI_API_KEY (any value, e.g. EMPTY,
                     for a local server that checks none)
    hf:PATH          a transformers causal LM from a local folder or a hub name, run in this process

`check_spec` refuses a bad spec before anything heavy is imported (the command line's refusals); `agent_from_spec`
makes the agent. Sampling settings (`temperature`, `max_tokens`, `concurrency`: requests in flight at once for
openai) apply to the model agents; None keeps the agent's own default.
"""
from __future__ import annotations

import os
from pathlib import Path

SPECS = "reference | files:DIR | pkb:DIR | openai:MODEL | hf:PATH"


def check_spec(spec: str, base_url: str | None = None, concurrency: int | None = None) -> None:
    """Raise ValueError (FileNotFoundError for a missing folder) naming what is wrong with `spec` (and the settings
    that only some agents take) and the fix."""
    kind, _, rest = spec.partition(":")
    rest = rest.strip()
    if kind != "openai":
        for given, option in ((base_url, "--base-url"), (concurrency, "--concurrency")):
            if given is not None:
                raise ValueError(f"{option} is for --agent openai:MODEL (requests to a server); --agent {spec} "
                                 f"takes none")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ValueError(f"--concurrency must be a positive integer (requests in flight at once), got {concurrency!r}")
    if spec == "reference":
        return
    if kind == "files":
        if not rest:
            raise ValueError("--agent files: needs a folder, e.g. --agent files:my_solutions/ (one <task>.py per task)")
        folder = Path(rest).expanduser()
        if not folder.exists():
            raise FileNotFoundError(f"no such folder: {folder}; --agent files:DIR needs a folder of <task>.py files")
        if folder.is_file():
            raise ValueError(f"--agent files:{folder} is a file; pass a folder holding one <task>.py per task "
                             f"(to judge a single file use `pkb-env eval TASK {folder}`)")
        return
    if kind == "pkb":
        if not rest or not Path(rest).expanduser().is_dir():
            raise ValueError(f"--agent {spec}: pass a folder of PKB-format files, e.g. --agent pkb:solutions_cuda/ "
                             f"(files named <N>_<problem>_<backend>.py)")
        return
    if kind == "openai":
        if not rest:
            raise ValueError("--agent openai: needs the served model's name, e.g. --agent openai:Qwen/Qwen2.5-Coder-7B")
        if not (base_url or os.environ.get("PKB_OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL")):
            raise ValueError("--agent openai: no server given: pass --base-url http://HOST:PORT/v1 or set "
                             "OPENAI_BASE_URL")
        if not os.environ.get("OPENAI_API_KEY"):
            raise ValueError("--agent openai: set OPENAI_API_KEY (any value, e.g. EMPTY, for a local server that "
                             "checks none); it goes only into the request's Authorization header")
        return
    if kind == "hf":
        if not rest:
            raise ValueError("--agent hf: needs a model folder or a hub name, e.g. --agent hf:./my-model")
        import importlib.util

        if importlib.util.find_spec("transformers") is None:
            raise ValueError("--agent hf: needs the 'transformers' package, which is not installed here: "
                             "pip install 'pkb-env[llm]'")
        return
    raise ValueError(f"unknown agent {spec!r}; use --agent {SPECS}")


def agent_from_spec(spec: str, base_url: str | None = None, temperature: float | None = None,
                    max_tokens: int | None = None, concurrency: int | None = None):
    """The agent `spec` names (module docstring), with the sampling settings given (None: the agent's default)."""
    check_spec(spec, base_url, concurrency)
    kind, _, rest = spec.partition(":")
    rest = rest.strip()
    sampling = {} if temperature is None else {"temperature": temperature}
    if spec == "reference":
        from pkb_env.agents.reference import ReferenceAgent

        return ReferenceAgent()
    if kind == "files":
        from pkb_env.agents.files import FileAgent

        folder = Path(rest).expanduser()
        agent = FileAgent(folder, by_task=True)  # FileNotFoundError names a folder without .py files
        agent.name = f"files:{folder}"
        return agent
    if kind == "pkb":
        from pkb_env.agents.files import PkbFileAgent

        folder = Path(rest).expanduser()
        agent = PkbFileAgent(folder)
        agent.name = f"pkb:{folder}"
        return agent
    if kind == "openai":
        from pkb_env.agents.openai_agent import OpenAIAgent

        more = {"max_tokens": max_tokens} if max_tokens is not None else {}
        if concurrency is not None:
            more["concurrency"] = concurrency
        agent = OpenAIAgent(base_url=base_url, model=rest, **sampling, **more)
        agent.name = f"openai:{rest}"
        return agent
    from pkb_env.agents.transformers_agent import TransformersAgent

    more = {"max_new_tokens": max_tokens} if max_tokens is not None else {}
    if temperature == 0:   # what 0 means to a server: greedy (transformers refuses to sample at 0)
        sampling = {"do_sample": False}
    agent = TransformersAgent.from_pretrained(rest, **sampling, **more)
    agent.name = f"hf:{rest}"
    return agent
