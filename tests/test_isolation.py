"""Candidates cannot reach the network, and (where the judge is root and the platform allows) cannot act
as root: signal the judge, write its files, or read its environment."""
import os
import socket
import threading

import pytest

from conftest import make_env


@pytest.fixture(scope="module")
def env2():
    env = make_env(world_size=2)
    env.reset(seed=0)
    yield env
    env.close()


def _verdict_message(env, body: str):
    """Run a candidate that raises with a message telling what it saw; return the feedback."""
    code = "def solution(tensor):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    _, _, _, _, info = env.step(code)
    assert info["verdict"] in ("runtime_error", "flagged"), info["feedback"]
    return info["feedback"]


def test_no_network_beyond_the_namespace(env2):
    isolation = env2.unwrapped.executor.isolation()
    if not isolation["network"].startswith("private"):
        pytest.skip(f"network isolation not available here: {isolation['network']}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    try:
        feedback = _verdict_message(env2, f"""import socket
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


def test_unprivileged_candidate_cannot_touch_the_judge(env2, tmp_path):
    isolation = env2.unwrapped.executor.isolation()
    if "uid 65534" not in isolation["privileges"]:
        pytest.skip(f"privilege drop not available here: {isolation['privileges']}")
    target = tmp_path / "judge-file"
    target.write_text("judge")
    # Obfuscated past the static screen on purpose: this checks the operating system's barrier, the one
    # that holds when the screen is fooled.
    feedback = _verdict_message(env2, f"""import os
results = [str(os.getuid())]
try:
    open({str(target)!r}, "w").write("pwned")
    results.append("WROTE")
except OSError as exc:
    results.append("nowrite")
try:
    getattr(os, "ki" + "ll")({os.getpid()}, 0)
    results.append("SIGNALLED")
except OSError:
    results.append("nosignal")
try:
    open("/" + "pr" + "oc/{os.getpid()}/environ").read()
    results.append("READENV")
except OSError:
    results.append("noenv")
raise RuntimeError("RESULT " + " ".join(results))""")
    assert "RESULT 65534 nowrite nosignal noenv" in feedback, feedback
    assert target.read_text() == "judge"
