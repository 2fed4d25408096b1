"""Every refusal of the command line that needs no judge is decided before torch is imported (issue 47, row 2): a
misspelt task on a loaded machine waited 20 s for torch to say so. All refusals run in one fresh interpreter, each
checked for torch in sys.modules when `main` returns (nothing after the refusal could import it)."""
import json
import subprocess
import sys

import pytest

SCRIPT = """
import contextlib, io, json, sys
from pkb_env.entrypoints.cli import main
seen = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:   # argparse's own usage errors
            code = exc.code
    seen.append({"code": code, "stderr": err.getvalue(), "torch": "torch" in sys.modules})
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    folder = tmp_path_factory.mktemp("refusals")
    (folder / "empty.py").write_text("\n  \n")
    (folder / "ring.py").write_text("def solution(tensor):\n    return tensor\n")
    (folder / "nothing_here").mkdir()
    cases = {
        "unknown task": (["eval", "all_gahter", str(folder / "ring.py")],
                         "unknown task 'all_gahter'; did you mean 'all_gather'?"),
        "unknown task to show": (["show", "nope"], "unknown task 'nope'; no task is named like it; `pkb-env tasks`"),
        "missing file": (["eval", "all_gather", str(folder / "nope.py")], "no such file or folder"),
        "empty file": (["eval", "all_gather", str(folder / "empty.py")], "empty.py is empty: nothing to judge"),
        "folder without .py files": (["eval", "all_gather", str(folder / "nothing_here")], "holds no .py files"),
        "world size the task cannot take": (["eval", "ulysses_attention", str(folder / "ring.py"), "--world-size",
                                             "3"], "cannot run at world size 3 with preset 'tiny': it takes 1, 2, 4"),
        "world size to show": (["show", "ulysses_attention", "--world-size", "3"], "cannot run at world size 3"),
        "preset the task lacks": (["show", "all_reduce", "--preset", "huge"], "has no preset 'huge'; choose one"),
        "dtype the task lacks": (["show", "all_reduce", "--dtype", "int8"], "does not take dtype 'int8'"),
        "unknown task to evaluate": (["evaluate", "--tasks", "all_reduce,nope"], "unknown task 'nope'"),
        "bad option": (["eval", "all_gather", str(folder / "ring.py"), "--bogus"], "unrecognized arguments: --bogus"),
    }
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([argv for argv, _ in cases.values()])],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return {label: (seen, cases[label][1]) for label, seen in zip(cases, json.loads(done.stdout))}


@pytest.mark.parametrize("label", [
    "unknown task", "unknown task to show", "missing file", "empty file", "folder without .py files",
    "world size the task cannot take", "world size to show", "preset the task lacks", "dtype the task lacks",
    "unknown task to evaluate", "bad option"])
def test_a_bad_input_is_refused_before_torch_is_imported(refused, label):
    seen, message = refused[label]
    assert seen["code"] == 2 and message in seen["stderr"], seen
    assert not seen["torch"], f"{label}: torch was imported before the refusal"
