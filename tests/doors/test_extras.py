"""A missing optional dependency fails where it is needed, naming the pip extra that installs it.

The packages are made unimportable the way Python itself spells "not installed" for an import
(`sys.modules[name] = None` makes `import name` raise ModuleNotFoundError), in a child process where the
entry point is a script, in this process where it is a function."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import make_env
from pkb_env.evaluation import EvaluationReport
from pkb_env.extras import MissingExtra, require


def _run_without(modules: list[str], *argv: str) -> subprocess.CompletedProcess:
    hide = "".join(f"sys.modules[{m!r}] = None; " for m in modules)
    code = (f"import runpy, sys; {hide}sys.argv = {['train_grpo', *argv]!r}; "
            f"runpy.run_module('pkb_env.agents.train_grpo', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_grpo_example_without_transformers_names_the_train_extra(tmp_path):
    done = _run_without(["transformers"], "--tiny", "--sanity", "--log-dir", str(tmp_path))
    assert done.returncode == 1
    assert "pip install 'pkb-env[train]'" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_grpo_track_without_wandb_names_the_wandb_extra(tmp_path):
    done = _run_without(["wandb"], "--tiny", "--sanity", "--track", "--log-dir", str(tmp_path))
    assert done.returncode == 1
    assert "--track" in done.stderr and "pip install 'pkb-env[wandb]'" in done.stderr, done.stderr


def test_wandb_logger_without_wandb(monkeypatch):
    from pkb_env.entrypoints.gym.wandb import WandbLogger

    monkeypatch.setitem(sys.modules, "wandb", None)
    env = make_env(world_size=2)
    try:
        with pytest.raises(MissingExtra, match=r"WandbLogger needs the 'wandb' package.*pkb-env\[wandb\]"):
            WandbLogger(env)
    finally:
        env.close()


def test_transformers_agent_without_transformers(monkeypatch):
    from pkb_env.agents import TransformersAgent

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingExtra, match=r"TransformersAgent needs the 'transformers' package.*pkb-env\[llm\]"):
        TransformersAgent.from_pretrained("/no/model/needed")


def test_evaluate_plot_without_matplotlib(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtra, match=r"pkb-env\[plot\]"):
        EvaluationReport(rows=[]).plot(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_require_returns_the_module():
    assert require("json", "dev", "a test") is sys.modules["json"]
    assert issubclass(MissingExtra, ImportError)  # callers that catch ImportError keep working
