"""Shared fixtures: one CPU judge (or environment) per test module (rank processes are expensive to start).

Tests of the core and the layers below it judge through a `JudgeService` (`judge2`, `judge4`, `cpu_judge`);
tests of the Gymnasium env and the other doors go through them (`make_env`). Every folder below is a package
(as tests/gpu and tests/adversarial), so tests/ is the one sys.path entry and `from conftest import ...` finds
this file from any of them. tests/tasks, rewards, solutions and agents share their names with the checkout's
own packages: pytest puts tests/ first, but a process that imports a test module with its own sys.path (the
checkout's folder first) finds the checkout's (tasks/test_golden.py's fork server imports none of them).
"""
from __future__ import annotations

import atexit
import os
from contextlib import contextmanager
import shutil
import tempfile
import time

import gymnasium
import psutil
import pytest
from pathlib import Path

# Calibrations and kernels go to a private cache, not the user's ~/.cache; set before any JudgeConfig is made
# (a config reads PKB_ENV_CACHE when it is made, FAST below at import).
def scratch(prefix: str) -> str:
    """A temporary folder made at import, removed when the process that made it exits: every process that imports
    this file makes its own (each xdist worker, the controller, a `pytest --collect-only` subprocess), and only a
    worker runs the session's teardown. Not in forked children, which share the folder with their parent."""
    path = tempfile.mkdtemp(prefix=prefix)
    maker = os.getpid()
    atexit.register(lambda: os.getpid() == maker and shutil.rmtree(path, ignore_errors=True))
    return path


CACHE = scratch("pkb-test-cache-")
os.environ["PKB_ENV_CACHE"] = CACHE

import pkb_env  # noqa: E402,F401  (registers the env)
from pkb_env import JudgeService  # noqa: E402
from pkb_env.config import JudgeConfig  # noqa: E402
from pkb_env.config import TimingProtocol  # noqa: E402

# Short time limits so that hangs and deadlocks are cut quickly; shorter bursts and budgets than production for
# speed (tests about timing itself use the production protocol, TimingProtocol.for_clock("host"): PRODUCTION).
FAST = JudgeConfig(trials=2, trial_timeout_s=6.0, build_timeout_s=20.0, timing_timeout_s=30.0,
                   protocol=TimingProtocol.quick("host"))
# Tests of verdicts alone (which candidates are correct or wrong, and why): a correct step is not timed (about half
# its time), as JudgeConfig(timing=False) gives users; tests of the judge's timing keep FAST or PRODUCTION.
VERDICTS = FAST.replace(timing=False)
PRODUCTION = JudgeConfig(trials=2, trial_timeout_s=10.0, timing_timeout_s=30.0,
                         protocol=TimingProtocol.for_clock("host"))


TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent   # the checkout
SUITE_SIZE = pytest.StashKey[int]()   # tests/test_docs.py: the README's quoted count against it


# The heaviest modules first, in this order (worker-seconds of whole-suite runs on the 2-core machine, 2026-12-05:
# 160-225 s for the first two, 55-110 s for the rest, re-ranked after later cuts as the last run's per-module times
# less each cut measured alone: tests/judge/test_multicast.py left the list at ~10 s, its extension build now
# tests/sandbox/test_compile_containment.py's). With `--dist loadfile` a worker takes the next
# module when it ends one, so the run ends when the last module taken ends: in path order these came last
# (tests/tasks/) and one worker ran them while the other had nothing left (44-70 s of a run). Longest first leaves
# short ones to even out the end. The rest keep their order, and every module its own.
HEAVY_FIRST = ("adversarial/test_adversarial.py", "tasks/test_references.py", "doors/test_pool.py",
               "tasks/test_golden.py", "solutions/test_expert_dataflow.py", "doors/test_training.py",
               "executors/test_timed_work.py", "sandbox/test_compile_containment.py", "doors/test_data.py",
               "doors/test_cli_contract.py", "tasks/test_candidates.py")


def heaviest_first(items: list) -> None:
    rank = {(TESTS / name).resolve(): i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.fspath).resolve(), len(rank)))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The heaviest modules first (HEAVY_FIRST). Count the suite as `pytest --collect-only -m "not gpu" tests` does (items without the gpu marker, which
    tests/gpu/conftest.py adds), where this session collected the whole of tests/ and selected by nothing but
    "not gpu" (each xdist worker of the CI run does): test_docs then need not collect it again in a subprocess
    (20 s on the 2-core CI machine). Last, after the markers are added and -m has deselected."""
    whole = any("::" not in arg and Path(config.invocation_params.dir, arg).resolve() in (TESTS, TESTS.parent)
                for arg in config.args)
    narrowed = config.getoption("keyword", "") or config.getoption("markexpr", "") not in ("", "not gpu") or any(
        config.getoption(name, None) for name in ("deselect", "ignore", "ignore_glob", "lf", "stepwise"))
    if whole and not narrowed:
        config.stash[SUITE_SIZE] = sum(1 for item in items if item.get_closest_marker("gpu") is None)
    heaviest_first(items)


@pytest.fixture(scope="session", autouse=True)
def _private_cache():
    yield
    shutil.rmtree(CACHE, ignore_errors=True)
    shutil.rmtree(EXAMPLES, ignore_errors=True)


# contract_v3_tasks/ copied out of the checkout: the cells never show a folder of the checkout beside the package
# (its tests hold solutions: pkb_env/sandbox/rootfs.py), so the example specs travel to ranks from a copy.
EXAMPLES = scratch("pkb-test-examples-")   # not under CACHE: no cell shows the judge's cache
os.chmod(EXAMPLES, 0o755)   # readable by the ranks' uid (nobody)
shutil.copytree(TESTS / "contract_v3_tasks", os.path.join(EXAMPLES, "contract_v3_tasks"),
                ignore=shutil.ignore_patterns("__pycache__"))


@contextmanager
def examples_importable():
    """While a judge is made inside it, `contract_v3_tasks.<name>` (contract v3's example specs, addressed by
    their dotted path: pkb_env/task.py) is importable by its rank processes: a copy's folder on PYTHONPATH, which
    the rank environment keeps and the cells bind. The judge reads the variable when it is made."""
    with pytest.MonkeyPatch.context() as patch:
        path = os.environ.get("PYTHONPATH")
        patch.setenv("PYTHONPATH", EXAMPLES + (os.pathsep + path if path else ""))
        yield


def variant(task: str, old: str, new: str) -> str:
    """The task's reference with `old` replaced by `new`; `old` must be there, so that the test breaks with the
    reference rather than quietly testing the reference itself."""
    from pkb_env.task import load_task

    source = load_task(task).reference_source
    assert old in source, f"{task}'s reference no longer contains {old!r}"
    return source.replace(old, new)


def cpu_judge(world_size: int, config: JudgeConfig = FAST, **kwargs) -> JudgeService:
    """A JudgeService on `world_size` CPU ranks with `config`'s other settings; `kwargs` are JudgeService's
    (progress, trace, recorder). Nothing starts until its first `open` (or `prestart`)."""
    return JudgeService(config.replace(executor="cpu", world_size=world_size), **kwargs)


# The machine's calibrations at world sizes 2 and 4, measured once by xdist's controller before it starts the
# workers (nothing else runs then), copied into each worker's cache as it imports this file. The roofline is a lower
# bound only with a calibration at the machine's best: measured by each worker under the other's load it was beaten
# by two references (broadcast 1.185, scatter 1.043 of their bound: whole-suite runs and CI,
# tests/tasks/test_references.py); docs/known_holes.md, "Timing and roofline". Without xdist the first module's
# judge measures it, with nothing beside it.
QUIET_CALIBRATIONS = "PKB_TEST_CALIBRATIONS"
if os.environ.get(QUIET_CALIBRATIONS):
    shutil.copytree(os.environ[QUIET_CALIBRATIONS], os.path.join(CACHE, "calibration"), dirs_exist_ok=True)


def pytest_configure(config):
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None) or \
            os.environ.get(QUIET_CALIBRATIONS):
        return
    for world_size in (2, 4):
        with cpu_judge(world_size) as judge:
            judge.calibrate()
    os.environ[QUIET_CALIBRATIONS] = os.path.join(CACHE, "calibration")


@pytest.fixture(scope="module")
def judge2():
    """One judge on 2 CPU ranks for the module, its ranks started and the machine calibrated (open, as an env's
    reset does), so that no test's first step pays for either."""
    with cpu_judge(2) as judge:
        judge.open("all_reduce")
        yield judge


@pytest.fixture(scope="module")
def judge4():
    """One judge on 4 CPU ranks for the module, its ranks started and the machine calibrated."""
    with cpu_judge(4) as judge:
        judge.open("all_reduce")
        yield judge


@pytest.fixture(scope="module")
def verdicts4():
    """One judge of verdicts only (VERDICTS) on 4 CPU ranks for the module, its ranks started: for tests of which
    code is correct or wrong, where a correct step's timing would only add time."""
    with cpu_judge(4, VERDICTS) as judge:
        judge.open("all_reduce")
        yield judge


def make_env(task="all_reduce", world_size=4, **kwargs):
    kwargs.setdefault("config", FAST)
    kwargs.setdefault("max_turns", 1000)
    return gymnasium.make("pkb_env/ParallelKernel-v0", task=task, world_size=world_size, executor="cpu", **kwargs)


def still_alive(pids: list[int], wait_s: float) -> list[int]:
    """The processes among `pids` still running (zombies count as gone) after waiting up to wait_s for them."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)
