"""CUDA faults in candidate kernels: each ends the step with a clear message, the next step is correct, and
the GPU gets its memory back (measured with NVML from the judge, which holds no CUDA context).

Faults: an illegal address in one rank, a device-side trap in every rank, a kernel that never ends in one
rank, a CUDA out-of-memory allocation, and a side stream still writing when the rank is killed. After each,
the GPU's used memory and compute-process count are compared with what they were after a clean step. The
measurements are written to $PKB_GPU_FAULTS_JSON when set (docs/measurements/2026-11-29-cuda-faults-h200.md
quotes them).
"""
from __future__ import annotations

import json
import os
import time

import gymnasium
import pytest

import pkb_env  # noqa: F401
from pkb_env.config import JudgeConfig

KERNEL = '''
import torch
import torch.distributed as dist
from pkb_env.runtime import compile_cuda, i64

SRC = r"""
extern "C" __global__ void poke(long long address) { *reinterpret_cast<volatile float*>(address) = 1.0f; }
extern "C" __global__ void trap() { asm volatile("trap;"); }
extern "C" __global__ void spin(long long n) { volatile long long i = 0; while (n >= 0) { i = i + 1; } }
"""


def solution(tensor):
    mod = compile_cuda(SRC)
    if WHEN:
        BODY
        torch.cuda.synchronize()
    dist.barrier()
    return tensor.clone()
'''


def kernel(when: str, body: str) -> str:
    return KERNEL.replace("WHEN", when).replace("BODY", body)


FAULTS = {
    "illegal_address_one_rank": (kernel("dist.get_rank() == 1", 'mod.function("poke")((1,), (1,), i64(64))'),
                                 ("illegal memory access",)),
    "trap_every_rank": (kernel("True", 'mod.function("trap")((1,), (1,))'),
                        ("unspecified launch failure", "illegal instruction", "device-side")),
    "endless_kernel_one_rank": (kernel("dist.get_rank() == 0", 'mod.function("spin")((1,), (1,), i64(1))'),
                                ("did not finish",)),
    "out_of_memory": ("import torch\ndef solution(tensor):\n    waste = torch.empty(1 << 46, dtype=torch.uint8, "
                      "device=tensor.device)\n    return tensor.clone()\n", ("out of memory",)),
    "side_stream_killed_mid_write": ('''
import torch
_side = []
def solution(tensor):
    if not _side:
        _side.append(torch.cuda.Stream())
        big = torch.empty(1 << 30, dtype=torch.uint8, device=tensor.device)
        with torch.cuda.stream(_side[0]):
            for _ in range(64):
                big.fill_(1)
                torch.cuda._sleep(50_000_000)
    raise RuntimeError("leaving with work in flight")
''', ("leaving with work in flight",)),
}
MEMORY_SLACK_BYTES = 512 << 20  # one CUDA context is ~500 MiB on an H200: a leaked rank would exceed this
RESULTS: dict[str, dict] = {}


def gpu_state() -> tuple[int, int]:
    """(used bytes, compute processes) of GPU 0, from NVML (no CUDA context in this process)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used, len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    finally:
        pynvml.nvmlShutdown()


def settled_state(seconds: float = 3.0) -> tuple[int, int]:
    """The GPU state once it stops changing (contexts of killed ranks take a moment to go)."""
    deadline = time.monotonic() + seconds
    state = gpu_state()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = gpu_state()
        if now == state:
            return now
        state = now
    return state


@pytest.fixture(scope="module")
def env():
    settings = JudgeConfig(trials=2, trial_timeout_s=20.0)
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=2, executor="cuda-emulated",
                         preset="bench", max_turns=1000, config=settings)
    env.reset(seed=0)
    yield env
    env.close()
    out = os.environ.get("PKB_GPU_FAULTS_JSON")
    if out:
        with open(out, "w") as f:
            json.dump(RESULTS, f, indent=1)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_cuda_fault_is_contained(env, fault):
    obs, _ = env.reset(options={"task": "all_reduce"})
    _, _, _, _, info = env.step(obs["reference"])
    assert info["correct"], info["feedback"]
    before = settled_state()

    code, phrases = FAULTS[fault]
    start = time.monotonic()
    _, reward, _, _, info = env.step(code)
    seconds = time.monotonic() - start
    assert info["verdict"] == "runtime_error", info["feedback"]
    assert any(p in info["feedback"] for p in phrases), info["feedback"][:2000]
    assert len(info["feedback"]) < 8000 and reward < 0

    _, _, _, _, info = env.step(obs["reference"])
    assert info["correct"], f"the step after {fault}: {info['feedback']}"
    after = settled_state()
    RESULTS[fault] = {"step_s": round(seconds, 2), "used_before_mib": before[0] >> 20,
                      "used_after_mib": after[0] >> 20, "processes_before": before[1], "processes_after": after[1]}
    print(fault, RESULTS[fault])
    assert after[0] <= before[0] + MEMORY_SLACK_BYTES, f"GPU memory grew from {before[0] >> 20} to {after[0] >> 20} MiB"
    assert after[1] <= before[1], f"GPU compute processes grew from {before[1]} to {after[1]}"
