"""The timing protocol on GPUs (docs/timing.md): the device gate, every timed call checked, host time charged,
forged reports flagged. Runs at world size = every GPU here, executor "cuda", preset bench (on one GPU at world
size 1: no communication, the same protocol and checks).
Quantities (within 10% of an independent measurement, repeatability across fresh processes, step latency)
are measured by benchmarks/, not asserted here.
"""
from __future__ import annotations

import sys
from pathlib import Path

import gymnasium
import pytest
import torch

import pkb_env  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from adversarial.exploits import BY_NAME as EXPLOITS  # noqa: E402
from judge.test_timing import ADDRESS_CACHE, HOST_BOUND, NOW_AND_THEN  # noqa: E402

# Wrong in one timed call out of 8 at any world size (NOW_AND_THEN reduces half a tensor: right at world size 1).
NOW_AND_THEN_ZEROS = NOW_AND_THEN.replace("dist.all_reduce(half)", "half.zero_()")

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0

# 50 tiny kernels per call on top of NCCL: launch-bound, the host's issue time is what a step feels.
FIFTY_KERNELS = """
import torch, torch.distributed as dist
def solution(tensor):
    out = tensor.clone()
    scratch = torch.zeros(8, device=tensor.device)
    for _ in range(50):
        scratch.add_(1.0)
    dist.all_reduce(out)
    return out
"""


@pytest.fixture(scope="module")
def cuda_env():
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=GPUS, executor="cuda",
                         preset="bench", max_turns=10_000)
    env.reset(seed=0)
    yield env
    env.close()


def test_bursts_start_at_a_device_gate(cuda_env):
    obs, _ = cuda_env.reset(options={"task": "all_reduce"})
    _, _, _, _, info = cuda_env.step(obs["reference"])
    assert info["correct"], info["feedback"]
    facts = cuda_env.unwrapped.client.run(lambda service: service.reference_facts())
    assert [f["gate"] for f in facts] == ["device"] * GPUS, facts
    t = info["record"].timing
    assert t.clock == "cuda" and t.statistic == "burst-median" and t.suspect is None and t.clock_margin_s > 0
    assert info["record"].verify.checked == 3 * GPUS and info["record"].timed_check.checked == t.calls * GPUS


@pytest.mark.parametrize("task", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_a_correct_reference_is_timed_and_never_suspect(cuda_env, task):
    obs, _ = cuda_env.reset(options={"task": task})
    for _ in range(3):
        _, _, _, _, info = cuda_env.step(obs["reference"])
        assert info["correct"] and info["speedup"] is not None, info["feedback"]
        assert info["record"].timing.suspect is None


def test_wrong_now_and_then_is_caught_on_gpus(cuda_env):
    cuda_env.reset(options={"task": "all_reduce"})
    for _ in range(20):  # 20 steps of 20: the bar (a sampled check caught it in 7 of 8)
        _, _, _, _, info = cuda_env.step(NOW_AND_THEN if GPUS > 1 else NOW_AND_THEN_ZEROS)
        assert info["verdict"] == "wrong" and info["stage"] == "time", info["feedback"]


def test_a_cache_keyed_on_input_addresses_is_wrong_on_gpus(cuda_env):
    cuda_env.reset(options={"task": "all_reduce"})
    code = ADDRESS_CACHE.replace("torch.tensor([1.0 if hit is not None else 0.0])",
                                 "torch.tensor([1.0 if hit is not None else 0.0], device='cuda')")
    assert code != ADDRESS_CACHE  # its agreement flag must be a CUDA tensor for NCCL
    _, _, _, _, info = cuda_env.step(code)
    assert info["verdict"] == "wrong", info["feedback"]


@pytest.mark.parametrize("code, least_s", [(HOST_BOUND, 200e-6), (FIFTY_KERNELS, None)],
                         ids=["200us_host", "50_kernels"])
def test_host_bound_candidates_are_charged(cuda_env, code, least_s):
    cuda_env.reset(options={"task": "all_reduce"})
    _, _, _, _, info = cuda_env.step(code)
    assert info["correct"], info["feedback"]
    t = info["record"].timing
    assert t.time_s >= 0.95 * t.launch_s, info["feedback"]  # never less than the host's time to issue a call
    if least_s:
        assert t.time_s >= least_s, info["feedback"]


@pytest.mark.parametrize("name", ["forge_burst_report_early", "forge_burst_report_swallowing",
                                  "forge_burst_report_with_nonce", "forge_error_blaming_the_judge"])
def test_forged_reports_are_flagged_on_gpus(cuda_env, name):
    cuda_env.reset(options={"task": "all_reduce"})
    _, reward, _, _, info = cuda_env.step(EXPLOITS[name].code)
    assert info["verdict"] == "flagged", info["feedback"]
    obs, _ = cuda_env.reset(options={"task": "all_reduce"})
    _, _, _, _, info = cuda_env.step(obs["reference"])  # the judge is intact
    assert info["correct"], info["feedback"]
