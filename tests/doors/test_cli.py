"""The CLI and the simple agents, run the way a user runs them."""
import json
import subprocess
import sys

import pytest

from pkb_env import solutions
from pkb_env.agents import Agent, FileAgent, ReferenceAgent
from pkb_env.entrypoints.cli import main
from pkb_env.task import task_names

RING = solutions.read("examples", "all_reduce_ring")


def test_tasks_lists_every_task(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for name in task_names():
        assert f"\n{name} " in out


def test_show_prints_the_prompt(capsys):
    assert main(["show", "reduce_scatter", "--executor", "cpu", "--world-size", "3"]) == 0
    out = capsys.readouterr().out
    assert "def solution(tensor" in out and "world size 3" in out and "```python" in out


def test_show_prints_the_envs_prompt_with_its_calibration(capsys):
    """`show` is the env's first observation, calibrated figures included where a calibration is cached."""
    from conftest import make_env

    env = make_env(world_size=2)
    try:
        obs, _ = env.reset(seed=0, options={"task": "all_gather"})   # calibrates here unless one is cached
    finally:
        env.close()
    assert main(["show", "all_gather", "--executor", "cpu", "--world-size", "2"]) == 0
    shown = capsys.readouterr().out
    assert "Measured here: bus bandwidth" in shown and shown.rstrip("\n") == obs["prompt"].rstrip("\n")


def test_show_says_when_its_prompt_lacks_the_calibration_the_env_would_measure(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PKB_ENV_CACHE", str(tmp_path))   # nothing cached: the env would calibrate at its open
    assert main(["show", "all_gather", "--executor", "cpu", "--world-size", "2"]) == 0
    out, err = capsys.readouterr()
    assert "Measured here" not in out and "pkb-env calibrate --world-size 2" in err
    assert main(["show", "all_gather", "--executor", "cpu", "--world-size", "1"]) == 0   # one rank: no link to measure
    assert "calibrate" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["show", "nope"], "unknown task 'nope'"),
    (["eval", "all_reduc", "x.py", "--executor", "cpu"], "unknown task 'all_reduc'; did you mean 'all_reduce'?"),
    (["show", "reduce_scatter", "--world-size", "0"], "world_size must be a positive integer"),
    (["eval", "all_reduce", "/no/such/file.py", "--executor", "cpu"], "no such file or folder"),
])
def test_errors_are_clear(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def folder_eval(tmp_path_factory):
    """One `eval` of a folder (one judge) for the two tests below: (exit code, stdout, folder)."""
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("eval_folder")
    (folder / "a_ring.py").write_text(RING)
    (folder / "b_broken.py").write_text("def solution(tensor):\n    raise RuntimeError('nope')\n")
    (folder / "c_in_place.py").write_text("import torch.distributed as dist\ndef solution(tensor):\n"
                                          "    dist.all_reduce(tensor)\n    return tensor\n")
    (folder / "d_latin1.py").write_bytes("# résumé of the ring\n".encode("latin-1") + RING.encode())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["eval", "all_reduce", str(folder), "--executor", "cpu", "--world-size", "2"])
    text = out.getvalue()
    return code, text, folder, {block.split(" ==")[0]: block for block in text.split("== ")[1:]}


def test_eval_folder_prints_stage_tables(folder_eval):
    code, out, folder, tables = folder_eval
    assert code == 3  # runtime_error, the worst of the folder's verdicts
    assert "== " in out and "stage" in out and "verify" in out
    assert "verdict correct" in out and "verdict runtime_error" in out and "verdict wrong" in out
    assert "a_ring.py" in out and "b_broken.py" in out
    broken, in_place = tables[str(folder / "b_broken.py")], tables[str(folder / "c_in_place.py")]
    # a candidate never timed shows no time row: the reference's work is a row of its own
    assert "\ntime " not in broken and "\ntime " not in in_place and "\nreference " in in_place
    # notes are not flags, and the verify row says how many rank outputs were checked and were wrong
    assert "1 note(s), none penalised" in in_place and "flag(s)" not in in_place
    assert "6 of 6 trial outputs wrong (12 problem(s))" in in_place


def test_eval_json_lines(tmp_path, capsys):
    path = tmp_path / "c.py"
    path.write_text("def solution(tensor):\n    return tensor.clone()\n")
    assert main(["eval", "all_reduce", str(path), "--executor", "cpu", "--world-size", "2", "--json"]) == 1  # wrong
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("{")][0]
    record = json.loads(line)
    assert record["verdict"] == "wrong" and record["verify"]["mismatches"]


def test_eval_notes_bytes_that_were_not_utf8(folder_eval):
    """A Latin-1 file is judged as read (its bad byte replaced), and the feedback says so (its table in the
    folder's output; the exit code of one correct file is test_cli_contract's)."""
    _, _, folder, tables = folder_eval
    latin1 = tables[str(folder / "d_latin1.py")]
    assert "verdict correct" in latin1
    assert "Notes: the code holds 2 U+FFFD replacement character(s), the first on line 1" in latin1


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_topology_without_gpu(capsys):
    assert main(["topology"]) == 0
    out = capsys.readouterr().out
    assert "no GPU found" in out and "topology config: cpu" in out
    assert "pip install" not in out  # nothing to install where no GPU exists (no driver's device node)
    assert "candidate containment here:" in out and "privileges:" in out


def test_a_reader_that_leaves_early_gets_no_traceback():
    out = subprocess.run(f"{sys.executable} -m pkb_env.entrypoints.cli tasks | head -1", shell=True, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith("Collective primitives") and out.stderr == "", out.stderr


def test_console_script_installed():
    out = subprocess.run([sys.executable, "-m", "pkb_env.entrypoints.cli", "tasks"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "all_to_all" in out.stdout


def test_agents(tmp_path):
    obs = {"reference": "def solution(x):\n    return x\n", "task_id": "all_reduce"}
    assert isinstance(ReferenceAgent(), Agent)
    assert ReferenceAgent().act(obs) == obs["reference"]
    (tmp_path / "all_reduce.py").write_text("A")
    (tmp_path / "broadcast.py").write_text("B")
    agent = FileAgent(tmp_path)
    assert [agent.act(obs), agent.act(obs), agent.act(obs)] == ["A", "B", "A"]
    assert FileAgent(tmp_path, by_task=True).act(obs) == "A"
    assert FileAgent(tmp_path / "broadcast.py").act(obs) == "B"
    with pytest.raises(FileNotFoundError, match="no file named"):
        FileAgent(tmp_path, by_task=True).act({"task_id": "gather"})
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no .py files"):
        FileAgent(tmp_path / "empty")
