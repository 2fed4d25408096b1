"""`pkb-env show TASK --topology NAME --world-size N` prints, on any machine, the prompt a machine with that board
would give (issue 47, row 4): held equal to the first observation a JudgeService builds on such a machine. That
machine is made here by the one thing this one lacks, the GPUs its detection reports (pkb_env.hardware.detect and
pkb_env.executors.gpu_count answer for 8 H200s); the service then makes its executor the way it would there
(make_executor: a cuda placement and topology, nothing started) and opens the task without starting ranks, with
the calibration it has cached (none: show does not measure either)."""
from __future__ import annotations

import pytest

from pkb_env import spaces
from pkb_env.config import JudgeConfig
from pkb_env.entrypoints.cli import main
from pkb_env.hardware import GpuInfo, MachineInfo


def _eight(name: str) -> MachineInfo:
    return MachineInfo(tuple(GpuInfo(i, name, 141.0, 18) for i in range(8)), driver="(detected by the test)")


@pytest.fixture
def board_here(monkeypatch):
    """This process sees 8 GPUs of the named model (detection only: nothing here runs on them)."""
    def install(name: str) -> None:
        monkeypatch.setattr("pkb_env.hardware.detect", lambda: _eight(name))
        monkeypatch.setattr("pkb_env.executors.gpu_count", lambda: 8)
    return install


def _first_observation(task: str, world_size: int, executor: str = "auto") -> dict:
    from pkb_env.service import JudgeService

    with JudgeService(JudgeConfig(executor=executor, world_size=world_size, calibration="cached")) as service:
        return spaces.observation(service.open(task, prestart=False))


@pytest.mark.parametrize("task, topology, gpu, world_size, executor", [
    ("gemm_reducescatter", "h200_8gpu", "NVIDIA H200", 8, "auto"),
    ("all_reduce", "b200_8gpu", "NVIDIA B200", 2, "cuda"),
    ("ulysses_attention", "h100_8gpu", "NVIDIA H100 80GB HBM3", 16, "auto"),   # more ranks than GPUs: emulated
])
def test_show_prints_the_prompt_such_a_machine_would_give(task, topology, gpu, world_size, executor, board_here,
                                                          capsys):
    assert main(["show", task, "--topology", topology, "--world-size", str(world_size),
                 "--executor", executor]) == 0
    shown = capsys.readouterr().out
    board_here(gpu)
    observation = _first_observation(task, world_size, executor)
    assert shown == observation["prompt"] + "\n"
    expected = "cuda" if world_size <= 8 else "cuda-emulated"
    assert f"Executor: {expected}, world size {world_size}." in shown and "## Kernel runtime (GPU executors)" in shown


def test_show_without_a_gpu_points_at_topology(capsys):
    assert main(["show", "all_reduce", "--executor", "cuda", "--world-size", "8"]) == 2
    err = capsys.readouterr().err
    assert "use --executor cpu" in err and "--topology h200_8gpu" in err and "executor='cpu'" not in err


@pytest.mark.parametrize("argv, message", [
    (["--topology", "cpu", "--executor", "cuda"], "topology 'cpu' has no GPUs: pick a GPU board with --topology"),
    (["--topology", "h200_8gpu", "--executor", "cpu"], "--executor cpu runs its ranks on CPU cores whatever the board"),
    (["--topology", "h200_8gpu", "--executor", "cuda", "--world-size", "16"],
     "the limit is 8 (8 GPU(s), one rank per GPU); --executor cuda-emulated runs more ranks than GPUs"),
    (["--topology", "h300_8gpu"], "invalid choice: 'h300_8gpu'"),
])
def test_show_refuses_a_machine_that_cannot_be(argv, message, capsys):
    try:
        code = main(["show", "all_reduce", *argv])
    except SystemExit as exc:   # argparse's own refusal
        code = exc.code
    assert code == 2 and message in capsys.readouterr().err
