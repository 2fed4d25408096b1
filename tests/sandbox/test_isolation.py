"""Candidates cannot reach the network, see or outlive their rank set, write anything but their own
directory and private scratch space, or (where the judge is root and the platform allows) act as root:
signal the judge, write its files, or read its environment. Without namespaces the judge still works,
and refuses to when containment is required."""
import os
import socket
import threading

import psutil
import pytest

import pkb_env
from conftest import FAST, cpu_judge
from pkb_env.config import JudgeConfig
from pkb_env.sandbox.containment import Containment, ContainmentError
from pkb_env.sandbox.limits import running
from pkb_env.task import load_task

NAMESPACES = Containment.of(JudgeConfig()).missing()
needs_namespaces = pytest.mark.skipif(NAMESPACES is not None, reason=f"no namespaces here: {NAMESPACES}")
REFERENCE = load_task("all_reduce").reference_source


def _verdict_message(judge, body: str):
    """Run a candidate that raises with a message telling what it saw; return the feedback."""
    code = "def solution(tensor):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    record = judge.judge("all_reduce", code)
    assert record.verdict.value in ("runtime_error", "flagged"), record.feedback
    return record.feedback


@needs_namespaces
def test_no_network_beyond_the_namespace(judge2):
    assert judge2.isolation()["network"].startswith("private")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    try:
        feedback = _verdict_message(judge2, f"""import socket
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", {port}))
    raise RuntimeError("REACHED the judge's loopback")
except OSError as exc:
    raise RuntimeError("BLOCKED " + type(exc).__name__)""")
    finally:
        server.close()
    assert "BLOCKED" in feedback and "REACHED" not in feedback


def test_unprivileged_candidate_cannot_touch_the_judge(judge2, tmp_path):
    isolation = judge2.isolation()
    if "uid 65534" not in isolation["privileges"]:
        pytest.skip(f"privilege drop not available here: {isolation['privileges']}")
    target = tmp_path / "judge-file"
    target.write_text("judge")
    # Past the static screen on purpose (libc's kill through ctypes, a computed /proc path): this checks the
    # operating system's barrier, the one that holds when the screen is fooled.
    feedback = _verdict_message(judge2, f"""import os
results = [str(os.getuid())]
try:
    open({str(target)!r}, "w").write("pwned")
    results.append("WROTE")
except OSError as exc:
    results.append("nowrite")
import ctypes
if ctypes.CDLL(None, use_errno=True).kill({os.getpid()}, 0) == 0:
    results.append("SIGNALLED")
else:
    results.append("nosignal")
try:
    open("/" + "pr" + "oc/{os.getpid()}/environ").read()
    results.append("READENV")
except OSError:
    results.append("noenv")
raise RuntimeError("RESULT " + " ".join(results))""")
    assert "RESULT 65534 nowrite nosignal noenv" in feedback, feedback
    assert target.read_text() == "judge"


@needs_namespaces
def test_a_generation_sees_only_itself_and_writes_only_its_own(judge2):
    isolation = judge2.isolation()
    assert isolation["pid"].startswith("private") and isolation["filesystem"].startswith("allowlisted root"), isolation
    package = os.path.dirname(pkb_env.__file__)
    # Obfuscated past the static screen on purpose: this checks the kernel's barrier, not the screen's.
    probe_code = f"""import os
seen = []
proc = "/" + "pr" + "oc"
seen.append("pids=" + ",".join(sorted(p for p in os.listdir(proc) if p.isdigit())))
seen.append("parent=" + str(os.getppid()))
for path in ({package!r} + "/pwned.py", "/pwned-root"):
    try:
        open(path, "w").write("x")
        seen.append("WROTE " + path)
    except OSError as exc:
        seen.append("refused " + path + " " + str(exc.errno))
open("/tmp/pkb-left-behind", "w").write("x")
seen.append("tmp=" + ",".join(sorted(os.listdir("/tmp"))))
raise RuntimeError("SEEN " + " ".join(seen) + " END")"""
    first = _verdict_message(judge2, probe_code)
    seen = first[first.index("SEEN pids="):].split(" END")[0].split()
    pids = [int(p) for p in seen[1].removeprefix("pids=").split(",")]
    assert max(pids) < 64, f"a rank sees processes beyond its rank set: {seen[1]}"
    assert seen[2] == "parent=0", "the cell (outside the namespace) must be invisible to its ranks"
    assert "WROTE" not in first, first
    assert not os.path.exists(os.path.join(package, "pwned.py"))
    assert not os.path.exists("/tmp/pkb-left-behind"), "a rank's /tmp reached the host"
    # The next rank set's /tmp is a fresh one: what this one left there is gone.
    second = _verdict_message(judge2, probe_code)
    tmp_entries = [part for part in second.split() if part.startswith("tmp=")][0]
    assert tmp_entries.count("pkb-left-behind") == 1, tmp_entries  # only this rank set's own write


def test_the_namespace_probe_runs_in_a_fresh_interpreter(monkeypatch):
    """The probe never forks the judge itself (which may run threads: a forked copy can deadlock on a lock
    another thread held; Python 3.12 warns), and says why where the child refuses."""
    from pkb_env.sandbox import namespaces

    def no_fork():
        raise AssertionError("the probe forked the judge's own process")

    monkeypatch.setattr(os, "fork", no_fork)
    answer = namespaces.probe()
    assert answer is None or answer.strip(), answer
    monkeypatch.setattr(namespaces, "_PROBE", "print('unshare refused: Operation not permitted')")
    assert namespaces.probe() == "unshare refused: Operation not permitted"


def test_without_namespaces_the_judge_still_works():
    with cpu_judge(2, FAST.replace(namespaces=False)) as judge:  # 3 steps
        with pytest.warns(RuntimeWarning, match="without namespaces.*PKB_ENV_REQUIRE_CONTAINMENT"):
            judge.open("all_reduce")
        assert judge.isolation()["pid"].startswith("off"), judge.isolation()
        record = judge.judge("all_reduce", REFERENCE)
        assert record.correct, record.feedback
        record = judge.judge("all_reduce", "import time\ndef solution(tensor):\n    while True:\n        time.sleep(0.01)\n")
        assert record.verdict.value == "runtime_error" and "did not finish" in record.feedback, record.feedback
        record = judge.judge("all_reduce", REFERENCE)
        assert record.correct, record.feedback
        # the zygote: the one process of the judge's that this process started
        (zygote,) = [p for p in psutil.Process().children() if p.pid in set(judge.process_ids())]
        # zygote's children: the pre-started candidate cell and the reference cell, nothing adopted
        assert len(zygote.children()) == 2, [c.cmdline() for c in zygote.children()]


def test_required_containment_refuses_to_run_without_it():
    with cpu_judge(2, FAST.replace(namespaces=False, require_containment=True)) as judge:
        with pytest.raises(ContainmentError, match="PKB_ENV_REQUIRE_CONTAINMENT"):
            judge.open("all_reduce")


JUDGE_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from conftest import VERDICTS, cpu_judge
judge = cpu_judge(2, VERDICTS)   # killed mid-trial: a judge that times would first calibrate its empty cache
judge.open("all_reduce")
judge.judge("all_reduce", '''import subprocess
def solution(tensor):
    subprocess.Popen(["sh", "-c", "(sleep {marker} &) ; sleep {marker}"], start_new_session=True)
    while True:
        pass
''')
"""


@needs_namespaces
def test_nothing_survives_a_killed_judge(tmp_path):
    """SIGKILL the judge while a candidate's detached children run: the namespace takes them all down, and
    the zygote, told as its parent dies, removes the executor's directory (nothing is left in $TMPDIR)."""
    import glob
    import subprocess
    import sys
    import time

    marker = "7" + str(os.getpid() % 1000).zfill(3)  # a sleep length no one else uses
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    own_tmp = tmp_path / "tmp"   # the judge's $TMPDIR, so that no other process's executor root counts
    own_tmp.mkdir()
    roots = os.path.join(own_tmp, "pkb-env-*")
    judge = subprocess.Popen([sys.executable, "-c", JUDGE_SCRIPT.format(tests=tests, marker=marker)],
                             env={**os.environ, "PKB_ENV_CACHE": str(tmp_path), "TMPDIR": str(own_tmp)})

    def left():
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] and "sleep" in p.info["cmdline"][0]
                and p.info["cmdline"][-1] == marker]

    try:
        deadline = time.monotonic() + 60
        while not left() and time.monotonic() < deadline and judge.poll() is None:
            time.sleep(0.1)
        assert left(), "the candidate's children never started"
        family = [c.pid for c in psutil.Process(judge.pid).children(recursive=True)]
        judge.kill()
        judge.wait()
        deadline = time.monotonic() + 10
        while (left() or any(running(p) for p in family)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left(), f"children outlived the judge: {[p.pid for p in left()]}"
        assert not [p for p in family if running(p)]  # running(): a process may end between two looks
        assert not glob.glob(roots), f"the killed judge left {glob.glob(roots)}"
    finally:
        for p in left():
            p.kill()
        if judge.poll() is None:
            judge.kill()
