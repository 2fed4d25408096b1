"""Candidates that raise, exit, deadlock or spin: the step ends in time, nothing is left running, the
next step is judged normally."""
import os
import time

import psutil
import pytest

from conftest import FAST, make_env, judge_of

# The orphans' command line names this test process, so that a test run elsewhere on the machine (whose
# candidates sleep too) is not mistaken for a survivor of this one.
SLEEP = ["sleep", f"600.{os.getpid()}"]

FAULTS = {
    "raises": ("""
def solution(tensor):
    raise ValueError("boom from the candidate")
""", "runtime_error", ["ValueError: boom from the candidate", "line 3"]),
    "os_exit_in_one_rank": ("""
import os, torch.distributed as dist
def solution(tensor):
    if dist.get_rank() == 1:
        os._exit(3)
    out = tensor.clone()
    dist.all_reduce(out)
    return out
""", "runtime_error", ["rank 1 exited with code 3"]),
    "deadlock_one_rank": ("""
import torch.distributed as dist
def solution(tensor):
    out = tensor.clone()
    if dist.get_rank() != 2:
        dist.all_reduce(out)   # rank 2 never joins: the others wait forever
    return out
""", "runtime_error", ["ranks 0, 1, 3 did not finish trials within trial_timeout_s = 6 s", "deadlock",
      "ranks finished: 2", "stuck at line 6 of the module, in solution: ranks 0, 1, 3"]),
    "infinite_loop": ("""
def solution(tensor):
    while True:
        pass
""", "runtime_error", ["ranks 0, 1, 2, 3 did not finish trials within", "stuck at line"]),
    "segfault": ("""
import ctypes
def solution(tensor):
    ctypes.string_at(0)
""", "flagged", ["ctypes.string_at"]),
    "import_error": ("""
import not_a_module_anywhere
def solution(tensor):
    return tensor
""", "build_error", ["ModuleNotFoundError", "not_a_module_anywhere"]),
    "spawns_children_then_hangs": ("""
import subprocess, time
def solution(tensor):
    for _ in range(3):
        subprocess.Popen(%r, start_new_session=True)
    time.sleep(600)
""" % SLEEP, "runtime_error", ["did not finish"]),
    "syntax_error": ("def solution(tensor:\n    return tensor\n", "unparsable", ["line"]),
    "abort_one_rank": ("""
import os, torch.distributed as dist
def solution(tensor):
    if dist.get_rank() == 3:
        os.abort()
    out = tensor.clone()
    dist.all_reduce(out)
    return out
""", "runtime_error", ["rank 3 was killed by SIGABRT"]),
    "out_of_memory": ("""
import torch
def solution(tensor):
    return torch.empty(1 << 40, dtype=torch.uint8)   # 1 TiB: over the rank's address-space limit
""", "runtime_error", ["RuntimeError", "alloc"]),
}


def test_huge_output_is_refused_not_fatal(env4):
    """A 400 MB output: refused by size in the rank with a message saying so; the judge stays up."""
    code = "import torch\ndef solution(tensor):\n    return torch.ones(100_000_000)\n"
    obs, _ = env4.reset(options={"task": "all_reduce"})
    _, _, _, _, info = env4.step(code)
    assert info["verdict"] == "runtime_error" and "381 MiB" in info["feedback"], info["feedback"]
    _, _, _, _, info = env4.step(obs["reference"])
    assert info["correct"]


def _descendants(env) -> set[int]:
    return set(judge_of(env).process_ids())


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_contained(env4, name):
    code, verdict, phrases = FAULTS[name]
    obs, _ = env4.reset(options={"task": "all_reduce"})
    before = _descendants(env4)
    start = time.monotonic()
    _, reward, _, _, info = env4.step(code)
    elapsed = time.monotonic() - start
    assert info["verdict"] == verdict, info["feedback"]
    for phrase in phrases:
        assert phrase in info["feedback"], info["feedback"]
    assert info["error"].count("did not finish") <= 1, info["error"]  # ranks that failed alike: one line
    assert elapsed < FAST.trial_timeout_s + FAST.build_timeout_s + 10
    assert reward < -0.2  # below a wrong answer
    # Nothing of the failed candidate survives: the executor owns only what it owned before (the
    # candidate rank set it used is replaced by the pre-started one), and no orphan 'sleep' of this run exists.
    after = _descendants(env4)
    assert len(after) <= len(before) + 4
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == SLEEP]
    # The next step is judged normally.
    _, _, _, _, info = env4.step(obs["reference"])
    assert info["correct"], info["feedback"]


def test_segfault_at_runtime_is_reported(env4):
    """A real SIGSEGV (through a path the static screen does not flag) is reported as a signal."""
    code = """
import faulthandler, torch.distributed as dist
def solution(tensor):
    if dist.get_rank() == 0:
        faulthandler._sigsegv()
    out = tensor.clone()
    dist.all_reduce(out)
    return out
"""
    obs, _ = env4.reset(options={"task": "all_reduce"})
    _, _, _, _, info = env4.step(code)
    assert info["verdict"] == "runtime_error", info["feedback"]
    assert "rank 0 was killed by SIGSEGV" in info["feedback"], info["feedback"]
    _, _, _, _, info = env4.step(obs["reference"])
    assert info["correct"]


def test_no_process_left_after_close():
    from conftest import make_env

    env = make_env(world_size=2)
    env.reset(seed=1)
    env.step("def solution(tensor):\n    while True: pass\n")
    pids = judge_of(env).process_ids()
    assert pids
    env.close()
    time.sleep(0.2)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_next_generation_that_cannot_start_does_not_cost_this_step(monkeypatch):
    """Starting the next candidate rank set (at release) can fail (a full disk, a dead zygote): the step
    that released keeps its verdict, and the next step starts its own rank set or says why it cannot."""
    env = make_env(world_size=2, target_speedup=float("inf"))
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        executor = judge_of(env).executor
        real = executor._start
        failures = []

        def refuse(role, hold=False):
            failures.append(role)
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(executor, "_start", refuse)
        _, _, _, _, info = env.step(obs["reference"])
        assert info["correct"], info["feedback"]
        assert failures and len(executor.spares) < executor.spares.depth
        monkeypatch.setattr(executor, "_start", real)
        _, _, _, _, info = env.step(obs["reference"])
        assert info["correct"], info["feedback"]
    finally:
        env.close()


@pytest.mark.parametrize("depth", [1, 4])
def test_spares_killed_in_any_phase_of_their_start_are_replaced(depth):
    """A pre-started rank set can die before it is used, in any phase of its start (whoever ran before
    killed it, or the machine did): the next step takes another or starts its own, and the spares are
    made up again, whatever phase each was in."""
    env = make_env(world_size=2, target_speedup=float("inf"), config=FAST.replace(spares=depth))
    try:
        executor = judge_of(env).executor
        if depth > 1 and executor.namespaces_missing:
            pytest.skip(f"held spares need cells with namespaces ({executor.namespaces_missing})")
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        for _ in range(2):
            _, _, _, _, info = env.step(obs["reference"])
            assert info["correct"], info["feedback"]
            assert len(executor.spares) == depth
            for spare in executor.spares:  # one rank of every spare, wherever its start has got to
                os.kill(spare.pids[-1], 9)
        _, _, _, _, info = env.step(obs["reference"])
        assert info["correct"], info["feedback"]
        assert len(executor.spares) == depth and all(s.alive() for s in executor.spares)
    finally:
        env.close()


def test_ranks_that_cannot_start_are_the_judges_failure_not_the_candidates(monkeypatch):
    """No candidate code has run in a rank set that fails to start (a host out of processes, a spare
    killed before it was used): after the spares and a second fresh start, the step is the judge's failure (a
    judge_error turn, the JudgeError's message in it, no reward) instead of charging the candidate a build error
    or an exploit flag, and the next step is judged."""
    env = make_env(world_size=2, target_speedup=float("inf"))
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_reduce"})
        executor = judge_of(env).executor
        real = executor._start
        starts = []

        def doomed(role, hold=False):
            gen = real(role, hold)
            starts.append(gen)
            for pid in gen.pids:
                os.kill(pid, 9)
            return gen

        for spare in executor.spares:
            os.kill(spare.pids[0], 9)
        monkeypatch.setattr(executor, "_start", doomed)
        _, reward, _, _, info = env.step(obs["reference"])
        assert info["verdict"] == "judge_error" and "failed to start" in info["error"] and reward == 0.0, info
        assert len(starts) == 2 and all(gen.closed for gen in starts)  # config.fresh_starts, each closed
        monkeypatch.setattr(executor, "_start", real)
        _, _, _, _, info = env.step(obs["reference"])
        assert info["correct"], info["feedback"]
    finally:
        env.close()
