"""A stand-in model for trying the verifiers environment without one: an OpenAI-compatible chat endpoint on
loopback that answers every chat completion with the next of some fixed replies, in turn.

    python examples/verifiers/replay_model.py --port 8765 replies.json    # a JSON list of reply strings
    vf-eval pkb_env.entrypoints.verifiers -m replay --client.base-url http://127.0.0.1:8765/v1 ...

It serves POST /v1/chat/completions (streamed or not) and GET /v1/models, and prints each request's last
message to stderr, so that the feedback the environment sent back can be read there.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handler_for(replies: list[str]):
    turn = itertools.cycle(replies)
    lock = threading.Lock()

    class Replay(BaseHTTPRequestHandler):
        def do_GET(self):
            self._json({"object": "list", "data": [{"id": "replay", "object": "model", "owned_by": "pkb-env"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            last = (body.get("messages") or [{}])[-1]
            print(f"[replay] {last.get('role')}: {str(last.get('content'))[:300]!r}", file=sys.stderr, flush=True)
            with lock:
                reply = next(turn)
            created, model = int(time.time()), body.get("model", "replay")
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            if not body.get("stream"):
                self._json({"id": f"replay-{created}", "object": "chat.completion", "created": created, "model": model,
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": reply}}], "usage": usage})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for delta, finish in (({"role": "assistant", "content": reply}, None), ({}, "stop")):
                chunk = {"id": f"replay-{created}", "object": "chat.completion.chunk", "created": created,
                         "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                if finish:
                    chunk["usage"] = usage
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def _json(self, payload):
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("replies", help="a JSON file holding a list of reply strings")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    with open(args.replies) as f:
        replies = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(replies))
    print(f"replaying {len(replies)} replies on http://127.0.0.1:{args.port}/v1", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
