"""The command line as a contract: exit codes a CI job can gate on, help for every option, --version,
--reward and --config, a world-size limit checked before anything starts, and Ctrl-C / SIGTERM that
leave no process and no temporary directory behind. Run the way a user runs it (in-process `main` or
the installed console script)."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import still_alive
from pkb_env import solutions
from pkb_env.entrypoints.cli import EXIT_CODES, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, main
from pkb_env.entrypoints.cli.options import parser as make_parser
from pkb_env.executors.capacity import CPU_RANKS_PER_CORE, usable_cores
from pkb_env.record import Verdict
from pkb_env.task import load_task

CPU2 = ["--executor", "cpu", "--world-size", "2"]
REFERENCE = load_task("all_reduce").reference_source
RING = solutions.read("examples", "all_reduce_ring")
CANDIDATES = {  # verdict -> a candidate that earns it
    "correct": REFERENCE,
    "wrong": "def solution(tensor):\n    return tensor.clone()  # forgot the peers\n",
    "unparsable": "this is prose, not a module ((\n",
    "runtime_error": "def solution(tensor):\n    raise RuntimeError('always')\n",
    "build_error": "import no_such_module_anywhere\n\ndef solution(tensor):\n    return tensor\n",
    "flagged": "import torch\ntorch.add = lambda *a, **k: None\n\ndef solution(tensor):\n    return tensor.clone()\n",
}


# -- exit codes ------------------------------------------------------------------------------------------
def test_exit_codes_are_distinct_and_documented():
    assert set(EXIT_CODES) == {verdict.value for verdict in Verdict}
    codes = [*EXIT_CODES.values(), EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED]
    assert len(set(codes)) == len(codes) and EXIT_CODES["correct"] == 0
    text = _subparser("eval").format_help()
    for verdict, code in EXIT_CODES.items():
        assert f"  {code}" in text and verdict in text


# "wrong": test_eval_exit_code_from_the_console_script (the same `main`, the same two checks, from the console)
@pytest.mark.parametrize("verdict", ["correct", "unparsable"])
def test_eval_exit_code_per_verdict(tmp_path, capsys, verdict):
    path = tmp_path / f"{verdict}.py"
    path.write_text(CANDIDATES[verdict])
    assert main(["eval", "all_reduce", str(path), *CPU2]) == EXIT_CODES[verdict]
    assert f"verdict {verdict}" in capsys.readouterr().out


def test_eval_exit_code_of_a_folder_is_the_worst_verdict(tmp_path, capsys):
    for verdict in ("correct", "wrong", "runtime_error", "build_error", "flagged"):
        (tmp_path / f"{verdict}.py").write_text(CANDIDATES[verdict])
    # verdicts only: the exit code reads verdicts, and a correct step's timing would only add time
    assert main(["eval", "all_reduce", str(tmp_path), *CPU2, "--json", "--no-timing"]) == EXIT_CODES["flagged"]
    out = capsys.readouterr().out
    seen = {line.split('"verdict": "')[1].split('"')[0] for line in out.splitlines() if line.startswith("{")}
    assert seen == {"correct", "wrong", "runtime_error", "build_error", "flagged"}
    (tmp_path / "flagged.py").unlink()
    assert main(["eval", "all_reduce", str(tmp_path), *CPU2, "--json", "--no-timing"]) == EXIT_CODES["build_error"]


def test_eval_exit_code_from_the_console_script(tmp_path):
    path = tmp_path / "wrong.py"
    path.write_text(CANDIDATES["wrong"])
    done = subprocess.run([sys.executable, "-m", "pkb_env.entrypoints.cli", "eval", "all_reduce", str(path), *CPU2],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == EXIT_CODES["wrong"], done.stderr[-2000:]
    assert "verdict wrong" in done.stdout


# -- help, version, --reward, --config --------------------------------------------------------------------
def _subparser(name: str) -> argparse.ArgumentParser:
    parser = make_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


@pytest.mark.parametrize("command", ["tasks", "show", "eval", "evaluate", "demo", "topology", "calibrate"])
def test_every_option_and_argument_has_help(command):
    p = _subparser(command)
    assert p.description
    for action in p._actions:
        assert action.help and action.help != argparse.SUPPRESS, f"{command}: {action.dest} has no help"


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    from pkb_env import __version__

    assert capsys.readouterr().out.strip() == f"pkb-env {__version__}"


def test_reward_option_reaches_the_env(tmp_path, capsys):
    path = tmp_path / "ref.py"
    path.write_text(REFERENCE)
    assert main(["eval", "all_reduce", str(path), *CPU2, "--reward", "fast_1", "--json"]) == 0
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("{")][0]
    assert '"reward": 0.0' in line or '"reward": 1.0' in line  # fast_1 pays 0 or 1, never the shaped values
    assert main(["eval", "all_reduce", str(path), *CPU2, "--reward", "no_such_reward"]) == EXIT_USAGE
    assert "unknown reward config 'no_such_reward'" in capsys.readouterr().err


def test_config_file_sets_options_and_the_command_line_wins(tmp_path, capsys):
    path = tmp_path / "wrong.py"
    path.write_text(CANDIDATES["wrong"])
    config = tmp_path / "eval.yaml"
    # timing, a judge setting: off, as nothing here reads it (a judge that times calibrates at world size 3 first)
    config.write_text("world-size: 3\nexecutor: cpu\njson: true\nreward: fast_1\ntiming: false\n")
    assert main(["eval", "all_reduce", str(path), "--config", str(config)]) == EXIT_CODES["wrong"]
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("{")][0]
    assert '"world_size": 3' in line and '"reward": 0.0' in line
    assert main(["eval", "all_reduce", str(path), "--config", str(config), "--world-size", "2"]) == EXIT_CODES["wrong"]
    assert '"world_size": 2' in capsys.readouterr().out


@pytest.mark.parametrize("text, message", [
    ("world_size: 2\ncolour: blue\n", "unknown option 'colour'"),
    ("world_size: many\n", "world_size: 'many' is not a valid value"),
    ("executor: tpu\n", "'tpu' is not one of auto, cpu, cuda, cuda-emulated"),
    ("json: 1\n", "json must be true or false"),
    ("- a\n- b\n", "must be a YAML mapping"),
    ("world_size: [\n", "is not valid YAML"),
])
def test_bad_config_files_name_the_problem(tmp_path, capsys, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    assert main(["eval", "all_reduce", str(tmp_path), "--config", str(config)]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_config_file_for_evaluate(tmp_path, capsys):
    config = tmp_path / "evaluate.yaml"
    out = tmp_path / "out"
    config.write_text(f"tasks: [broadcast]\nexecutor: cpu\nworld_size: 2\nk: [1]\nout: {out}\n")
    assert main(["evaluate", "--config", str(config)]) == 0
    report = (out / "report.json").read_text()
    assert '"broadcast"' in report and '"all_reduce"' not in report


# -- world-size limit -------------------------------------------------------------------------------------
def test_world_size_over_the_limit_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    limit = usable_cores() * CPU_RANKS_PER_CORE
    assert main(["eval", "all_reduce", str(tmp_path), "--world-size", str(limit + 1), "--executor", "cpu"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"the limit is {limit} ({usable_cores()} usable core(s) x {CPU_RANKS_PER_CORE} ranks per core)" in err
    assert f"--world-size {limit} or less" in err and f"PKB_ENV_MAX_WORLD_SIZE={limit + 1}" in err
    assert not list(tmp_path.iterdir()), "nothing may start for a refused world size"


def test_world_size_refusal_does_not_import_torch():
    """What makes the refusal immediate on a CPU machine: no torch import (about a second) before it."""
    code = ("import sys; from pkb_env.entrypoints.cli import main; rc = main(['eval', 'all_reduce', '.', '--world-size', '1000', "
            "'--executor', 'cpu']); print(rc, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == [str(EXIT_USAGE), "False"], done.stderr
    assert "world size 1000" in done.stderr and "Traceback" not in done.stderr


# -- demo and calibrate ------------------------------------------------------------------------------------
def test_demo_runs_the_three_candidates(capsys):
    assert main(["demo", *CPU2]) == 0
    out, err = capsys.readouterr()
    assert "executor: cpu, world size 2" in out and "# Task: All-reduce" in out
    assert "\r" not in err and "judging:" not in err  # no progress bar where stderr is not a terminal
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("reference", "ring", "wrong:"))}
    assert " correct " in rows["reference"] and " correct " in rows["ring"] and " wrong " in rows["wrong:"]


def test_calibrate_measures_and_saves(capsys):
    assert main(["calibrate", *CPU2]) == 0
    out = capsys.readouterr().out
    assert "all_reduce bytes" in out and "busbw GB/s" in out
    saved = Path(out.split("saved to ")[1].strip())
    assert saved.is_file() and str(saved).startswith(os.environ["PKB_ENV_CACHE"])
    latency_us = float(out.split("roofline peaks: latency ")[1].split(" us")[0])
    assert latency_us > 0


# -- Ctrl-C and SIGTERM --------------------------------------------------------------------------------------
SLOW = '''import time

import torch
import torch.distributed as dist


def solution(tensor):
    print("SOLUTION ENTERED", flush=True)
    time.sleep(60)
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


@pytest.mark.parametrize("signum, code, word", [(signal.SIGINT, EXIT_INTERRUPTED, "interrupted"),
                                                (signal.SIGTERM, EXIT_TERMINATED, "terminated")])
def test_a_signal_mid_step_leaves_nothing(tmp_path, signum, code, word):
    """A terminal's Ctrl-C (SIGINT to the foreground process group) or a SIGTERM while every rank is inside
    the candidate: one line on stderr, the documented exit code, no process and no directory left. Verdicts only:
    the step is stopped in its trials, and a judge that times would first calibrate at world size 8."""
    world_size = 8
    candidate = tmp_path / "slow.py"
    candidate.write_text(SLOW)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    # As a shell starts a foreground job: its own process group, SIGINT at its default disposition.
    proc = subprocess.Popen([sys.executable, "-m", "pkb_env.entrypoints.cli", "eval", "all_reduce", str(candidate), "--executor",
                             "cpu", "--world-size", str(world_size), "--no-timing"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_a_foreground_job)
    try:
        logs = []
        deadline = time.monotonic() + 180
        while len(logs) < world_size and time.monotonic() < deadline and proc.poll() is None:
            logs = [p for p in scratch.glob("pkb-env-*/pkb-candidate-*/rank*.log") if "SOLUTION ENTERED" in _read(p)]
            time.sleep(0.2)
        assert len(logs) == world_size, f"the candidate never ran on every rank: {proc.poll()} {_read_err(proc)}"
        family = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(family) > world_size
        os.killpg(proc.pid, signum) if signum == signal.SIGINT else proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err and f"pkb-env: {word}" in err, err
    assert "verdict" not in out  # interrupted mid-step, not after it
    left = still_alive(family, wait_s=10)
    assert not left, f"processes left: {left}"
    assert not list(scratch.iterdir()), f"files left: {list(scratch.rglob('*'))[:5]}"


def _as_a_foreground_job() -> None:
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _read_err(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        return "(still running)"
    return proc.stderr.read()[-2000:]
