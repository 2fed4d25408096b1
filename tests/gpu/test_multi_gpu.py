"""Real multi-GPU judging: the cuda executor at world size = every GPU here (one process per GPU, NCCL
references), each rank set in its own namespaces. Skipped on machines with fewer than two GPUs.

Every task's reference is correct, timed near its own speed and within its roofline (calibrated and
datasheet fractions <= 1); every expert (solutions/experts) is correct and timed; the calibration measured
NCCL's bus bandwidth, a bf16 matmul and a device copy below the datasheet; a side-stream cheat is caught.
"""
from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest
import torch

import pkb_env  # noqa: F401
from pkb_env.task import runnable_tasks

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.skipif(GPUS < 2, reason=f"needs at least 2 GPUs, found {GPUS}")
EXPERTS = Path(__file__).resolve().parents[2] / "solutions" / "experts"

SIDE_STREAM = '''
import torch
import torch.distributed as dist
_side = []
def solution(tensor):
    if not _side:
        _side.append(torch.cuda.Stream())
    out = tensor.clone()
    with torch.cuda.stream(_side[0]):          # never joined to the caller's stream
        torch.cuda._sleep(2_000_000)
        dist.all_reduce(out)
    return out
'''


@pytest.fixture(scope="module")
def cuda_all():
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=GPUS, executor="cuda",
                         preset="bench", max_turns=1000)
    env.reset(seed=0)
    yield env
    env.close()


@pytest.mark.parametrize("task", runnable_tasks(max(GPUS, 2), "bench"))
def test_reference_on_every_gpu(cuda_all, task):
    obs, _ = cuda_all.reset(options={"task": task})
    _, _, _, _, info = cuda_all.step(obs["reference"])
    assert info["correct"], info["feedback"]
    assert 0.5 <= info["speedup"] <= 2.0, info["feedback"]
    roofline = info["record"].roofline
    assert roofline is not None and roofline.bound.source == "calibrated" and 0 < roofline.fraction <= 1.0
    assert roofline.spec_fraction is not None and roofline.spec_fraction <= 1.0, info["feedback"]


@pytest.mark.parametrize("task", sorted(p.stem for p in EXPERTS.glob("*.py")))
def test_expert_on_every_gpu(cuda_all, task):
    cuda_all.reset(options={"task": task})
    _, _, _, _, info = cuda_all.step((EXPERTS / f"{task}.py").read_text())
    assert info["correct"], info["feedback"]
    assert info["speedup"] is not None and info["speedup"] > 0, info["feedback"]


def test_side_stream_cheat_on_every_gpu(cuda_all):
    cuda_all.reset(options={"task": "all_reduce"})
    _, _, _, _, info = cuda_all.step(SIDE_STREAM)
    assert info["verdict"] == "wrong", info["feedback"]


# A PCIe 5.0 x16 link carries at most 64 GB/s each way (32 GT/s x 16 lanes, 128b/130b): anything measured above
# it between two GPUs went over NVLink. The 2-GPU H200 host measured 268 GB/s busbw and 378-380 GB/s copies.
PCIE5_X16_GBPS = 64.0


def test_calibration_measured_nvlink(cuda_all):
    """NVML says every pair is linked by NVLink, and the calibration measured more than PCIe could carry."""
    from pkb_env.hardware import detect

    links = detect().links
    assert links and set(links.values()) == {"NVLink"}, links
    calibration = cuda_all.unwrapped.client.run(lambda service: service.calibration())
    assert calibration.world_size == GPUS and calibration.bandwidth_gbps > PCIE5_X16_GBPS, calibration
    across = {(src, dst): gbps for src, dst, gbps in calibration.peer_copy_gbps if src != dst}
    assert set(across) == {(a, b) for a in range(GPUS) for b in range(GPUS) if a != b}, calibration.peer_copy_gbps
    assert min(across.values()) > PCIE5_X16_GBPS, calibration.peer_copy_gbps


def test_calibration_measured_the_compute_and_memory_peaks_under_the_datasheet(cuda_all):
    """A large bf16 matmul and a device copy, measured in the reference rank set: real (above a third of
    the datasheet) and possible (under it), so the calibrated bound stays a lower bound."""
    calibration, topology = cuda_all.unwrapped.client.run(lambda service: (service.calibration(), service.topology))
    sheet = topology.datasheet_peaks()
    if sheet is None:
        pytest.skip(f"no datasheet for {topology.name}")
    matmul = dict(calibration.matmul_tflops)
    assert sheet.matmul_tflops["bfloat16"] / 3 < matmul["bfloat16"] <= sheet.matmul_tflops["bfloat16"], calibration
    assert sheet.hbm_gbps / 3 < calibration.copy_gbps <= sheet.hbm_gbps, calibration
    assert calibration.bandwidth_gbps <= sheet.link_gbps and calibration.alpha_s >= sheet.alpha_s, calibration
