"""`pkb-env serve`, the OpenEnv server, started as a process and driven over loopback (docs/integrations.md).

One server for the module (CPU ranks, world size 2, conftest's FAST judge settings through --config, at most
2 sessions; its imports alone take 9 s here): clients that close normally leave no error in its log; the
project's PkbEnvClient resets two sessions to two tasks and steps correct and wrong code;
/health and /schema answer; a third session is refused; 20 bad requests (WebSocket and HTTP) each get an
error naming the problem and the server goes on serving; the last test stops it with SIGTERM and checks that
no process of it is left. A TRL GRPOTrainer run takes its reward from the server through the client.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest
import yaml

from conftest import FAST, still_alive
from pkb_env.task import load_task

pytest.importorskip("openenv.core")
from pkb_env.entrypoints.openenv import PkbAction, PkbEnvClient  # noqa: E402

REFERENCE = {name: load_task(name).reference_source for name in ("all_reduce", "all_gather")}
WRONG = "def solution(tensor):\n    return tensor.clone()\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def post(url: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`pkb-env serve` on a free loopback port, until the SIGTERM test (or the module's end) stops it."""
    folder = tmp_path_factory.mktemp("serve")
    config, log = folder / "judge.yaml", open(folder / "serve.log", "w+")   # a file: a full pipe would stall it
    settings = {"trials": FAST.trials, "trial_timeout_s": FAST.trial_timeout_s, "build_timeout_s": FAST.build_timeout_s,
                "timing_timeout_s": FAST.timing_timeout_s, "protocol": dataclasses.asdict(FAST.protocol)}
    config.write_text(yaml.safe_dump(settings))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pkb_env.entrypoints.cli", "serve", "--port", str(port), "--executor", "cpu",
                             "--world-size", "2", "--max-sessions", "2", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log = log
    base = f"http://127.0.0.1:{port}"
    for _ in range(240):   # up to a minute for the imports and the bind
        if proc.poll() is not None:
            pytest.fail(f"pkb-env serve exited {proc.returncode}:\n{output(proc)}")
        try:
            if get(base + "/health")[0] == 200:
                break
        except OSError:
            time.sleep(0.25)
    else:
        proc.kill()
        pytest.fail("pkb-env serve did not answer /health within a minute")
    yield proc, base
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)
    log.close()


def output(proc) -> str:
    proc.log.seek(0)
    return proc.log.read()


@pytest.mark.timeout(240)
def test_clients_that_close_normally_leave_no_error_in_the_log(server):
    """A client's normal close leaves no error in the log (issue 47, row 10): every close logged "ERROR: Exception
    in ASGI application" and a traceback (OpenEnv closed a socket the client had closed; server.QuietClose).
    Sessions that reset and close, the async, sync and abrupt ways (a client whose connection is gone before the
    server closes it: deterministic, where the others race). First in the module, so that no other test's session
    ends in the part of the log read here."""
    proc, base = server
    start = len(output(proc))

    async def sessions():
        async with PkbEnvClient(base_url=base) as env:            # closed by the context manager
            assert (await env.reset(task="all_reduce")).observation.task == "all_reduce"
        env = PkbEnvClient(base_url=base)                          # closed by hand
        await env.reset(task="all_gather")
        await env.close()

    async def abrupt():   # a client gone before the server's close: what a fast client's close races into
        from websockets.asyncio.client import connect

        ws = await connect(base.replace("http", "ws") + "/ws")
        await ws.send(json.dumps({"type": "close"}))
        ws.transport.abort()

    asyncio.run(sessions())
    with PkbEnvClient(base_url=base).sync() as env:                # the sync wrapper
        env.reset(task="all_reduce")
    asyncio.run(abrupt())
    for _ in range(120):   # the server logs each session's end once it has handled the close
        text = output(proc)[start:]
        if text.count("connection closed") >= 4 or "Traceback" in text:
            break
        time.sleep(0.25)
    text = output(proc)[start:]
    assert text.count("connection closed") == 4, text
    assert "Exception in ASGI application" not in text and "Traceback" not in text, text


@pytest.mark.timeout(240)
def test_two_sessions_on_two_tasks_judge_correct_and_wrong_code(server):
    proc, base = server
    status, health = get(base + "/health")
    assert (status, health["status"]) == (200, "healthy")
    status, schema = get(base + "/schema")
    assert status == 200 and "code" in schema["action"]["properties"]
    assert {"prompt", "feedback", "verdict", "speedup", "roofline_fraction"} <= set(schema["observation"]["properties"])

    async def episodes():
        async with PkbEnvClient(base_url=base) as a, PkbEnvClient(base_url=base) as b:
            first_a, first_b = await asyncio.gather(a.reset(task="all_reduce"), b.reset(task="all_gather"))
            # the two sessions' steps are sent at once: they queue on the server's one judge
            wrong, right_b = await asyncio.gather(a.step(PkbAction(code=WRONG)),
                                                  b.step(PkbAction(code=REFERENCE["all_gather"])))
            right_a = await a.step(PkbAction(code=f"My answer:\n```python\n{REFERENCE['all_reduce']}```"))
            refusal = await asyncio.to_thread(third_session, base)   # over --max-sessions 2
            return first_a, first_b, wrong, right_a, right_b, await a.state(), await b.state(), refusal

    first_a, first_b, wrong, right_a, right_b, state_a, state_b, refusal = asyncio.run(episodes())
    print("third session:", refusal)
    assert refusal["code"] == "CAPACITY_REACHED" and refusal["max_sessions"] == 2
    for result in (wrong, right_a, right_b):
        obs = result.observation
        print(f"{obs.task} turn {obs.turn}: {obs.verdict} reward {result.reward:+.3f} done {result.done} "
              f"speedup {obs.speedup} roofline {obs.roofline_fraction} feedback {obs.feedback[:80]!r}")
    assert first_a.observation.task == "all_reduce" and first_b.observation.task == "all_gather"
    assert "all_gather" in first_b.observation.prompt and first_a.observation.verdict is None
    assert (wrong.observation.verdict, wrong.reward, wrong.done) == ("wrong", -0.2, False)
    assert "WRONG" in wrong.observation.feedback and wrong.observation.feedback in wrong.observation.prompt
    for right in (right_a, right_b):
        assert right.observation.verdict == "correct" and right.observation.correct and right.reward > 0
        assert right.observation.speedup is not None and right.observation.roofline_fraction is not None
    assert (state_a.task, state_a.turn, state_a.best_verdict) == ("all_reduce", 2, "correct")
    assert (state_b.task, state_b.turn, state_b.best_reward) == ("all_gather", 1, right_b.reward)
    assert proc.poll() is None


def raw_post(base: str, path: str, header: str, body: bytes) -> str:
    """POST over a plain socket, sending the head and `body` at once, and read the answer: for the bodies the
    server refuses unread (a client that sends the body after the head, as urllib does, can meet the closed
    socket, a broken pipe, and never read the answer)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{header}\r\n"
                  f"\r\n".encode() + body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return f"HTTP {head.split()[1].decode()}: {json.loads(body)['detail']}"


def oversize_post(base: str) -> str:
    """A body announced as 2 MB, of which the first 64 KiB are sent: the server answers before reading it."""
    return raw_post(base, "/step", f"Content-Length: {2 << 20}", b" " * (64 << 10))


def third_session(base: str) -> dict:
    """What the server says to a session past its limit: an error frame as it accepts, then it closes. (Read
    raw here: OpenEnv's client may lose that frame when the close beats its first send.)"""
    from websockets.sync.client import connect

    with connect(base.replace("http", "ws") + "/ws") as ws:
        reply = json.loads(ws.recv(timeout=30))
    assert reply["type"] == "error", reply
    return reply["data"]


def bad_requests(base: str) -> list[tuple[str, str]]:
    """20 bad requests, each (what was sent, the error the server answered)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    ws_url = base.replace("http", "ws") + "/ws"
    answers = []

    def over_ws(what: str, frames: list) -> None:
        with connect(ws_url, max_size=None) as ws:
            for frame in frames:
                ws.send(frame if isinstance(frame, str) else json.dumps(frame))
                try:
                    reply = json.loads(ws.recv(timeout=60))
                except ConnectionClosed as exc:
                    answers.append((what, f"closed {exc.rcvd.code} {exc.rcvd.reason}"))
                    return
            assert reply["type"] == "error", (what, reply)
            answers.append((what, f"{reply['data']['code']}: {reply['data']['message']} "
                                  f"{reply['data'].get('errors', [{}])[0].get('msg', '')}"))

    reset = {"type": "reset", "data": {"task": "all_reduce"}}
    over_ws("garbage JSON", ["{not json"])
    over_ws("unknown message type", [{"type": "launch"}])
    over_ws("step before reset", [{"type": "step", "data": {"code": WRONG}}])
    over_ws("reset to an unknown task", [{"type": "reset", "data": {"task": "all_reduse"}}])
    over_ws("reset without a task", [{"type": "reset", "data": {}}])
    over_ws("reset with a number for the task", [{"type": "reset", "data": {"task": 7}}])
    over_ws("reset with an unknown argument", [{"type": "reset", "data": {"task": "all_reduce", "level": 3}}])
    over_ws("empty code", [reset, {"type": "step", "data": {"code": ""}}])
    over_ws("code of spaces", [reset, {"type": "step", "data": {"code": "   \n"}}])
    over_ws("code as a number", [reset, {"type": "step", "data": {"code": 42}}])
    over_ws("step without code", [reset, {"type": "step", "data": {}}])
    over_ws("an unknown action field", [reset, {"type": "step", "data": {"code": WRONG, "lang": "cuda"}}])
    over_ws("a 2 MB message", [{"type": "step", "data": {"code": "x" * (2 << 20)}}])
    for what, path, body, headers in (
            ("HTTP garbage JSON", "/step", b"{not json", {}),
            ("HTTP step without an episode", "/step", json.dumps({"action": {"code": WRONG}}).encode(), {}),
            ("HTTP reset to an unknown task", "/reset", json.dumps({"task": "nope"}).encode(), {}),
            ("HTTP step with code as a list", "/step", json.dumps({"action": {"code": ["a"]}}).encode(), {})):
        status, reply = post(base + path, body, headers)
        assert status >= 400, (what, status, reply)
        answers.append((what, f"HTTP {status}: {json.dumps(reply.get('detail'))[:300]}"))
    answers.append(("HTTP chunked body", raw_post(base, "/reset", "Transfer-Encoding: chunked", b"2\r\n{}\r\n0\r\n\r\n")))
    answers.append(("HTTP 2 MB body", oversize_post(base)))
    status, _ = get(base + "/no-such-route")
    answers.append(("HTTP unknown route", f"HTTP {status}"))
    return answers


@pytest.mark.timeout(240)
def test_bad_requests_get_errors_and_the_server_keeps_serving(server):
    proc, base = server
    answers = bad_requests(base)
    for what, answer in answers:
        print(f"{what:36} -> {answer[:200]}")
    assert len(answers) == 20
    said = dict(answers)
    assert said["garbage JSON"].startswith("INVALID_JSON")
    assert "reset(task=NAME) first" in said["step before reset"]
    assert "all_reduce" in said["reset to an unknown task"] and "reset needs task=NAME" in said["reset without a task"]
    assert "unknown reset argument(s) level" in said["reset with an unknown argument"]
    assert "code is empty" in said["empty code"] and "code is empty" in said["code of spaces"]
    assert said["a 2 MB message"].startswith("closed 1009")
    assert said["HTTP 2 MB body"].startswith("HTTP 413") and "limit" in said["HTTP 2 MB body"]
    assert said["HTTP chunked body"].startswith("HTTP 411") and "Content-Length" in said["HTTP chunked body"]
    assert said["HTTP step without an episode"].startswith("HTTP 400") and "WebSocket" in said["HTTP step without an episode"]
    assert proc.poll() is None and get(base + "/health")[0] == 200

    with PkbEnvClient(base_url=base).sync() as env:   # and still judges
        env.reset(task="all_reduce")
        assert env.step(PkbAction(code=WRONG)).observation.verdict == "wrong"


@pytest.mark.timeout(300)
def test_trl_grpo_trainer_takes_its_reward_from_the_server(server, tmp_path):
    """Two GRPO steps of a tiny random model (as tests/doors/test_training.py's), each completion judged by the server."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from pkb_env.agents.train_grpo import make_tiny_model, make_tiny_tokenizer
    from pkb_env.entrypoints.openenv import server_reward

    proc, base = server
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(tokenizer, seed=0)
    rows = [{"prompt": [{"role": "user", "content": f"Write {t} for 2 ranks."}], "task": t}
            for t in ("all_reduce", "all_gather", "all_reduce", "all_gather")]
    config = trl.GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                            max_completion_length=8, use_cpu=True, report_to=[], logging_steps=1,
                            save_strategy="no", seed=0)
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[server_reward(base)],
                              train_dataset=datasets.Dataset.from_list(rows), args=config)
    result = trainer.train()
    logged = [h for h in trainer.state.log_history if "rewards/pkb_server/mean" in h]
    print([(h["step"], h["rewards/pkb_server/mean"]) for h in logged])
    assert result.global_step == 2 and len(logged) == 2
    # a random model writes no solution: the server's judge says unparsable (-0.8), through the whole path
    assert all(h["rewards/pkb_server/mean"] == pytest.approx(-0.8) for h in logged)
    assert proc.poll() is None


@pytest.mark.timeout(120)
def test_sigterm_stops_the_server_and_every_rank_process(server):
    proc, _ = server
    processes = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert len(processes) > 2, processes   # the server and its judge's rank processes
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    said = output(proc)
    print(said[-600:])
    assert proc.returncode == 143 and "terminated (SIGTERM)" in said
    assert still_alive(processes, 30) == []
