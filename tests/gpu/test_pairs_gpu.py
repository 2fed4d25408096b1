"""Interleaved pairs on a GPU (docs/timing.md, "Paired speedup"): the reference's probe before each replay sees a
kernel that a stopped process left running, and an honest step's probes stay far below the limit.
The speedup's spread over steps and fresh processes is measured by benchmarks/self_speedup.py and
benchmarks/repeatability.py, not asserted here."""
from __future__ import annotations

import signal
import subprocess
import sys

import gymnasium
import pytest
import torch

import pkb_env  # noqa: F401
from pkb_env.config import TimingProtocol
from pkb_env.ranks.clocks import device_wait

# A process that starts a ~2 s kernel, says so, and stops itself: the kernel runs on.
LEFT_RUNNING = """
import os, signal, torch
torch.cuda.init()
torch.cuda._sleep(int(4e9))          # about 2 s of clock cycles on one stream, launched and not waited for
print("launched", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def test_a_kernel_left_running_by_a_stopped_process_delays_the_probe():
    limit = TimingProtocol.for_clock("cuda").contended_s
    probe = torch.zeros(1, device="cuda")
    device_wait(probe)   # this process's context and the kernel's first launch
    idle = device_wait(probe)
    proc = subprocess.Popen([sys.executable, "-c", LEFT_RUNNING], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "launched"
        busy = device_wait(probe)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    after = device_wait(probe)
    print(f"device wait: idle {idle * 1e6:.0f} us, beside a stopped process's kernel {busy * 1e3:.2f} ms, "
          f"after it was killed {after * 1e6:.0f} us (limit {limit * 1e3:.1f} ms)")
    assert idle < limit and after < limit
    assert busy > limit


def test_an_honest_step_pairs_every_burst_and_its_probes_stay_below_the_limit():
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=1, executor="cuda",
                         preset="bench", max_turns=1000)
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(3):
            _, _, _, _, info = env.step(obs["reference"])
            timing = info["record"].timing
            assert info["correct"] and timing.suspect is None, info["feedback"]
            assert timing.pairs == timing.bursts >= 5 and timing.device_wait_s is not None
            assert timing.device_wait_s < env.unwrapped.client.run(lambda service: service.protocol).contended_s
            print(f"speedup {timing.speedup:.3f} over {timing.pairs} pairs, spread {timing.speedup_spread:.3f}, "
                  f"longest probe {timing.device_wait_s * 1e6:.0f} us")
    finally:
        env.close()
