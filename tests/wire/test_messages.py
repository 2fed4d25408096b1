"""What a rank may say: strict schemas, nonces, turns (pkb_env/wire/messages.py, channel.py)."""
from __future__ import annotations

import json
import socket
from multiprocessing.connection import Connection

import pytest

from pkb_env.wire import channel
from pkb_env.wire.messages import ForgedMessage, check, new_nonce

NONCE = new_nonce()
BURST = {"event": "burst", "nonce": NONCE, "rank": 1, "seen_at": 1.0, "ended_at": 1.01, "busy_s": 0.01,
         "host_s": 0.009, "idle_s": None, "wait_s": None, "marks": [0.001, 0.002], "payload": False}


def test_an_honest_answer_passes():
    check(dict(BURST), False, "burst", NONCE, 1)
    check({"event": "error", "nonce": NONCE, "rank": 1, "phase": "timing", "message": "ValueError: x",
           "tampered": False, "payload": False}, False, "burst", NONCE, 1)
    check({"event": "request", "kind": "compile", "source": "...", "payload": False}, False, "burst", NONCE, 1)


@pytest.mark.parametrize("change, reason", [
    ({"nonce": new_nonce()}, "wrong nonce"),
    ({"nonce": None}, "out of schema"),
    ({"rank": 0}, "signed as rank 0"),
    ({"event": "calibrated"}, "unknown kind"),
    ({"event": "built", "seconds": 0.1}, "out of turn"),
    ({"payload": True}, "claims a payload"),
    ({"times": [1e-6]}, "keys out of schema"),
    ({"busy_s": "0.001"}, "'busy_s' is out of schema"),
    ({"marks": [0.0] * 5000}, "'marks' is out of schema"),
])
def test_anything_else_is_a_forgery(change, reason):
    header = {k: v for k, v in {**BURST, **change}.items() if v is not None or k in ("idle_s", "wait_s")}
    with pytest.raises(ForgedMessage, match=reason):
        check(header, header.get("payload", False), "burst", NONCE, 1)


def test_a_header_that_swallows_the_next_frame_is_refused():
    """The forged report of issue 13 claimed a payload so that the real report was read as its payload."""
    with pytest.raises(ForgedMessage, match="claims a payload"):
        check({**BURST, "payload": True}, True, "burst", NONCE, 1)
    with pytest.raises(ForgedMessage, match="claims a payload"):
        check({"event": "request", "kind": "compile", "payload": True}, True, "burst", NONCE, 1)


def test_json_constants_are_not_json():
    ours, theirs = socket.socketpair()
    a, b = Connection(ours.detach()), Connection(theirs.detach())
    a.send_bytes(json.dumps({"event": "burst", "busy_s": float("nan")}).encode())
    with pytest.raises(channel.ChannelError, match="NaN"):
        channel.recv(b)
    a.close()
    b.close()
