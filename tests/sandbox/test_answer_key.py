"""No answer key in reach: a rank that searches every path it can read finds no solution source (docs/containment.md).

The answer key is every file of the project that is not needed to run a rank: expert and example solutions,
policies and recipes, rewards, configs, tests, benchmarks, docs and examples. A candidate walks the whole root
its rank sees (past the static screen on purpose: the paths are computed, so this checks the cell's wall) and
looks for each of those files by name and content (a SHA-256 of every visible file whose name and size match
one). It also reads every Python file of the package it can see and finds `def solution(` only where a rank needs
or a model is shown it (the task references, the prompt's worked example, wrong demo candidates, the screen's own
messages). A canary keeps the search honest: the task's own reference.py must be found, or the walk saw nothing.
Both as the checkout's editable install runs the judge and as a wheel installed elsewhere does. On CPU ranks,
verdicts only (timing off): the search runs in each rank's first call, and timing would only call the candidate
again in the same rank processes (the search's answer kept), after calibrating the wheel's fresh cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import TESTS, VERDICTS
from pkb_env import JudgeService
from pkb_env.config import JudgeConfig
from pkb_env.sandbox.containment import Containment
from pkb_env.task import load_task

NAMESPACES = Containment.of(JudgeConfig()).missing()
pytestmark = pytest.mark.skipif(NAMESPACES is not None, reason=f"no namespaces here: {NAMESPACES}")

CHECKOUT = TESTS.parent
KEY_FOLDERS = ("solutions", "agents", "rewards", "configs", "tests", "benchmarks", "docs", "examples", "environments")
SMALLEST = 200   # bytes: smaller files (empty __init__.py, one-line configs) are shared with unrelated packages
# Modules of the package that hold `def solution(` and are no answer key: the prompt's worked example (shown to
# every model), the demo's wrong candidate, the screen's and the SFT recipe's own messages.
VETTED = ("pkb_env/prompt.py", "pkb_env/contract/signature.py", "pkb_env/judge/screen/signature.py",
          "pkb_env/entrypoints/cli/commands.py", "pkb_env/data/recipes.py")
CANDIDATE = '''
import hashlib, os
import torch.distributed as dist

KEY = {key!r}            # (name, size) -> SHA-256 of each answer-key file
VETTED = {vetted!r}
CANARY = {canary!r}      # the task's reference: must be found
FOUND = None


def search():
    hits, canary, package_files = [], [], 0
    skip = tuple("/" + name for name in ("pr" + "oc", "sys", "dev"))
    for top, dirs, files in os.walk("/"):
        if top.startswith(skip):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(top, name)
            try:
                size = os.lstat(path).st_size
                digest = None
                if (name, size) in KEY or (name, size) == CANARY[:2]:
                    with open(path, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()
                if digest is not None and digest == CANARY[2]:
                    canary.append(path)
                elif digest is not None and digest == KEY.get((name, size)):
                    hits.append("answer key: " + path)
                if name.endswith(".py") and "/pkb_env/" in path or "/tasks/" in path and name.endswith(".py"):
                    package_files += 1
                    with open(path, "rb") as f:
                        text = f.read()
                    legit = (name == "reference.py" and "/tasks/" in path) or path.endswith(VETTED)
                    if b"def solution(" in text and not legit:
                        hits.append("solution source: " + path)
            except OSError:
                continue
    if not canary:
        hits.append(f"the canary (the task's reference) was not found: the walk saw nothing ({{package_files}} "
                    f"package files read)")
    return hits


def solution(tensor):
    global FOUND
    if FOUND is None:
        FOUND = search() if dist.get_rank() == 0 else []
    if FOUND:
        raise RuntimeError(" | ".join(FOUND[:20]))
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def searching_candidate() -> str:
    key = {}
    for folder in KEY_FOLDERS:
        for path in (CHECKOUT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.stat().st_size >= SMALLEST:
                key[(path.name, path.stat().st_size)] = _digest(path)
    assert len(key) > 150, f"the answer key should hold the project's solutions, tests and docs: {len(key)} files"
    reference = load_task("all_reduce").reference_path
    canary = (reference.name, reference.stat().st_size, _digest(reference))
    return CANDIDATE.format(key=key, vetted=VETTED, canary=canary)


def test_a_rank_of_the_checkout_finds_no_answer_key():
    config = VERDICTS.replace(world_size=2, trials=1, trial_timeout_s=240.0)
    with JudgeService(config) as judge:
        record = judge.judge("all_reduce", searching_candidate())
    assert record.verdict.value == "correct", record.feedback


def judged_from_a_wheel(tmp_path: Path, executor: str, world_size: int, isolated: bool = True,
                        timing: bool = True) -> dict:
    """The searching candidate judged by a wheel of the checkout installed in tmp_path (`pip wheel`, then
    `pip install --target`), in a fresh interpreter on `executor`: {'package', 'verdict', 'feedback'}.
    `isolated=False` builds with the installed setuptools and wheel (a machine without a package index);
    `timing=False` judges verdicts only."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    isolation = [] if isolated else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(wheels),
                    str(CHECKOUT)], check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    *map(str, wheels.glob("*.whl"))], check=True, capture_output=True, timeout=600)
    assert (target / "pkb_env" / "solutions" / "experts" / "all_reduce.py").is_file(), "the wheel ships the experts"
    code = tmp_path / "candidate.py"
    code.write_text(searching_candidate())
    driver = (
        "import json, sys, pkb_env\n"
        "from pkb_env import JudgeConfig, JudgeService\n"
        f"config = JudgeConfig(executor={executor!r}, world_size={world_size}, trials=1, trial_timeout_s=240.0, "
        f"timing={timing})\n"
        "with JudgeService(config) as judge:\n"
        "    record = judge.judge('all_reduce', open(sys.argv[1]).read())\n"
        "print(json.dumps({'package': pkb_env.__file__, 'verdict': record.verdict.value, 'feedback': record.feedback}))\n")
    path = os.pathsep.join(p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PKB_ENV_CACHE": tempfile.mkdtemp(dir=tmp_path)}
    done = subprocess.run([sys.executable, "-c", driver, str(code)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["package"].startswith(str(target)), f"the wheel's pkb_env was not the one imported: {result}"
    return result


def test_a_rank_of_a_wheel_install_finds_no_answer_key(tmp_path):
    """The wheel holds the solutions inside the package (pkb_env/solutions): every cell covers them."""
    result = judged_from_a_wheel(tmp_path, "cpu", 2, timing=False)
    assert result["verdict"] == "correct", result["feedback"]
