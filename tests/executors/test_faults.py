"""Candidates that raise, exit, deadlock or spin: the step ends in time, nothing is left running, the
next step is judged normally. Faults of the judge's own processes (a start that fails, a spare killed):
test_injected_faults.py."""
import os
import time

import psutil
import pytest

from conftest import FAST, cpu_judge
from pkb_env.rewards import load_reward
from pkb_env.task import load_task

REFERENCE = load_task("all_reduce").reference_source
REWARD = load_reward("default")   # the env's

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


def test_huge_output_is_refused_not_fatal(judge4):
    """A 400 MB output: refused by size in the rank with a message saying so; the judge stays up."""
    code = "import torch\ndef solution(tensor):\n    return torch.ones(100_000_000)\n"
    record = judge4.judge("all_reduce", code)
    assert record.verdict.value == "runtime_error" and "381 MiB" in record.feedback, record.feedback
    record = judge4.judge("all_reduce", REFERENCE)
    assert record.correct


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_contained(judge4, name):
    code, verdict, phrases = FAULTS[name]
    before = set(judge4.process_ids())
    start = time.monotonic()
    record = judge4.judge("all_reduce", code)
    elapsed = time.monotonic() - start
    assert record.verdict.value == verdict, record.feedback
    for phrase in phrases:
        assert phrase in record.feedback, record.feedback
    assert record.error.count("did not finish") <= 1, record.error  # ranks that failed alike: one line
    assert elapsed < FAST.trial_timeout_s + FAST.build_timeout_s + 10
    assert REWARD(record).value < -0.2  # below a wrong answer
    # Nothing of the failed candidate survives: the executor owns only what it owned before (the
    # candidate rank set it used is replaced by the pre-started one), and no orphan 'sleep' of this run exists.
    after = set(judge4.process_ids())
    assert len(after) <= len(before) + 4
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == SLEEP]
    # The next step is judged normally.
    record = judge4.judge("all_reduce", REFERENCE)
    assert record.correct, record.feedback


def test_segfault_at_runtime_is_reported(judge4):
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
    record = judge4.judge("all_reduce", code)
    assert record.verdict.value == "runtime_error", record.feedback
    assert "rank 0 was killed by SIGSEGV" in record.feedback, record.feedback
    record = judge4.judge("all_reduce", REFERENCE)
    assert record.correct


def test_no_process_left_after_close():
    judge = cpu_judge(2)
    judge.open("all_reduce")
    judge.judge("all_reduce", "def solution(tensor):\n    while True: pass\n")
    pids = judge.process_ids()
    assert pids
    judge.close()
    time.sleep(0.2)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
