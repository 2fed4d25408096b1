"""Stopping a candidate's processes while the reference is timed (pkb_env/sandbox/freezer.py), on real processes:
every thread of every descendant stopped, all of them running again after, and a set that keeps growing
refused in bounded time with nothing left stopped."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from pkb_env.sandbox import freezer

# A process with two sleeping threads and a child in a session of its own that has a thread too.
FAMILY = """
import subprocess, sys, threading, time
def tick():
    while True:
        time.sleep(0.001)
for _ in range(2):
    threading.Thread(target=tick, daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import threading, time\\n"
                          "threading.Thread(target=lambda: time.sleep(600), daemon=True).start()\\n"
                          "print('ready', flush=True)\\n"
                          "while True: time.sleep(0.001)"], start_new_session=True, stdout=subprocess.PIPE)
child.stdout.readline()
print("ready", flush=True)
time.sleep(600)
"""


def running_threads(pids) -> int:
    return sum(not freezer._all_threads_stopped(pid) for pid in pids)


def test_every_thread_of_every_descendant_stops_and_runs_again():
    parent = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        tree = {parent.pid} | freezer.descendants([parent.pid])
        assert len(tree) == 2 and all(len(psutil.Process(p).threads()) >= 2 for p in tree), tree
        stopped = freezer.stop(lambda: {parent.pid} | freezer.descendants([parent.pid]), timeout_s=5.0)
        assert stopped == tree
        assert all(psutil.Process(p).status() == psutil.STATUS_STOPPED for p in tree)
        assert running_threads(tree) == 0
        freezer.resume(stopped)
        for _ in range(200):   # SIGCONT lands within microseconds; a loaded machine may take longer
            if running_threads(tree) == len(tree):
                break
            time.sleep(0.01)
        assert running_threads(tree) == len(tree)
    finally:
        for p in {parent.pid} | freezer.descendants([parent.pid]):
            psutil.Process(p).kill()
        parent.wait()


def test_a_set_that_keeps_growing_is_refused_in_bounded_time_and_left_running():
    """Each listing finds a process the last one did not (a candidate that keeps forking): FreezeFailed after
    the timeout, and what was stopped meanwhile runs again."""
    made: list[subprocess.Popen] = []

    def growing() -> set[int]:
        time.sleep(0.02)   # a new process every listing, about 15 in all
        made.append(subprocess.Popen(["sleep", "600"]))
        return {p.pid for p in made}

    try:
        start = time.monotonic()
        with pytest.raises(freezer.FreezeFailed, match="still running after 0.3 s"):
            freezer.stop(growing, timeout_s=0.3)
        assert time.monotonic() - start < 5.0 and len(made) >= 2
        for _ in range(200):
            if not any(psutil.Process(p.pid).status() == psutil.STATUS_STOPPED for p in made):
                break
            time.sleep(0.01)
        assert not [p.pid for p in made if psutil.Process(p.pid).status() == psutil.STATUS_STOPPED]
    finally:
        for p in made:
            p.kill()
            p.wait()
