"""A client's normal close leaves no error in `pkb-env serve`'s log (issue 47, row 10): every close logged "ERROR:
Exception in ASGI application" and a traceback (OpenEnv closed a socket the client had closed; server.QuietClose).
One server (CPU ranks, world size 2) and sessions that reset and close, the async, sync and abrupt ways (a client
whose connection is gone before the server closes it: deterministic, where the others race)."""
from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("openenv.core")
from pkb_env.entrypoints.openenv import PkbEnvClient  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(log_path, "w+")
    proc = subprocess.Popen([sys.executable, "-m", "pkb_env.entrypoints.cli", "serve", "--port", str(port),
                             "--executor", "cpu", "--world-size", "2", "--max-sessions", "2"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(240):
        assert proc.poll() is None, log_path.read_text()
        try:
            with urllib.request.urlopen(base + "/health", timeout=5):
                break
        except OSError:
            time.sleep(0.25)
    yield base, log_path
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    log.close()


def test_clients_that_close_normally_leave_no_error_in_the_log(server):
    base, log = server

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
        if log.read_text().count("connection closed") >= 4 or "Traceback" in log.read_text():
            break
        time.sleep(0.25)
    text = log.read_text()
    assert text.count("connection closed") == 4, text
    assert "Exception in ASGI application" not in text and "Traceback" not in text, text
