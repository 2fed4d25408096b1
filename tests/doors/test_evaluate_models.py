"""`pkb-env evaluate` evaluates a model (issue 47, row 3): `--agent openai:MODEL` against an OpenAI-compatible server
(here a replay server on loopback that answers each task with a recorded completion) and `--agent hf:PATH` (a tiny
transformers model saved to a folder here), each writing the usual report. Nothing is downloaded."""
from __future__ import annotations

import json
import re
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pkb_env.entrypoints.cli import main
from pkb_env.task import load_task

WRONG = "```python\ndef solution(tensor):\n    return tensor.clone()\n```"
# What the replay server answers, by the task named on the prompt's first line ("# Task: ... (name)")
REPLAYS = {"all_reduce": "Here it is.\n```python\n" + load_task("all_reduce").reference_source + "```\n",
           "all_gather": WRONG}
# Judge settings for a quick run (tests/conftest.py's FAST, as a --config file)
QUICK = ("executor: cpu\nworld_size: 2\ntrials: 1\ntrial_timeout_s: 6\nprotocol:\n  burst_s: 0.015\n"
         "  budget_s: 0.05\n  reference_budget_s: 0.15\n  min_bursts: 3\n  replay_budget_s: 0.3\n"
         "  warmup_bursts: 1\n  interval_budget_s: null\n")


@contextmanager
def replay_server(replays: dict[str, str], together: int):
    """An OpenAI-compatible chat-completions server on 127.0.0.1 answering from `replays`; each request waits (up to
    5 s) until `together` requests are in flight, so that a client sending them one at a time is seen to."""
    seen, lock = [], threading.Lock()
    in_flight, barrier = [0, 0], threading.Barrier(together, timeout=5)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                in_flight[0] += 1
                in_flight[1] = max(in_flight)
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pass
            task = re.search(r"\(([a-z0-9_]+)\)\n", body["messages"][-1]["content"]).group(1)
            with lock:
                seen.append({"task": task, "auth": self.headers["Authorization"], **body})
                in_flight[0] -= 1
            reply = json.dumps({"object": "chat.completion", "model": body["model"], "choices": [
                {"index": i, "message": {"role": "assistant", "content": replays[task]}, "finish_reason": "stop"}
                for i in range(body["n"])]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen, in_flight
    finally:
        server.shutdown()
        server.server_close()


def _report(out):
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().startswith("#") and (out / "speedup_vs_roofline.png").stat().st_size > 0
    return report


def test_evaluate_an_openai_compatible_server(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-replay")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("PKB_OPENAI_BASE_URL", raising=False)
    (tmp_path / "quick.yaml").write_text(QUICK)
    with replay_server(REPLAYS, together=2) as (url, seen, in_flight):
        code = main(["evaluate", "--agent", "openai:replayed-model", "--base-url", url, "--tasks",
                     "all_reduce,all_gather", "--samples", "2", "--k", "1,2", "--temperature", "0.3",
                     "--max-tokens", "512", "--concurrency", "2", "--config", str(tmp_path / "quick.yaml"),
                     "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    assert sorted(r["task"] for r in seen) == ["all_gather", "all_reduce"]   # one request per task, n samples each
    assert all(r["n"] == 2 and r["temperature"] == 0.3 and r["max_tokens"] == 512 and r["model"] == "replayed-model"
               and r["auth"] == "Bearer sk-replay" for r in seen), seen
    assert in_flight[1] == 2   # --concurrency 2: both tasks' requests at once
    report = _report(tmp_path / "out")
    assert report["meta"]["agent"] == "openai:replayed-model"
    verdicts = sorted((row["task"], row["verdict"]) for row in report["rows"])
    assert verdicts == [("all_gather", "wrong")] * 2 + [("all_reduce", "correct")] * 2, verdicts


def test_evaluate_refuses_an_openai_agent_it_cannot_reach_before_anything_starts(monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("PKB_OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert main(["evaluate", "--agent", "openai:m", "--tasks", "all_reduce"]) == 2
    assert "pass --base-url" in capsys.readouterr().err
    assert main(["evaluate", "--agent", "reference", "--concurrency", "4"]) == 2
    assert "--concurrency is for --agent openai" in capsys.readouterr().err
    monkeypatch.delenv("OPENAI_API_KEY")
    assert main(["evaluate", "--agent", "openai:m", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "set OPENAI_API_KEY" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 2-layer Llama with random weights and a byte-level BPE trained here, saved as a model folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    text = load_task("all_reduce").reference_source
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"],
                                                        show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=raw.get_vocab_size(), hidden_size=16, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=32,
                                         max_position_embeddings=8192, bos_token_id=1, eos_token_id=2))
    folder = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_evaluate_a_local_transformers_model(tiny_model, tmp_path, capsys):
    (tmp_path / "quick.yaml").write_text(QUICK)
    code = main(["evaluate", "--agent", f"hf:{tiny_model}", "--tasks", "all_reduce", "--samples", "2", "--k", "1,2",
                 "--max-tokens", "6", "--config", str(tmp_path / "quick.yaml"), "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    report = _report(tmp_path / "out")
    assert report["meta"]["agent"] == f"hf:{tiny_model}" and len(report["rows"]) == 2
    assert {row["verdict"] for row in report["rows"]} == {"unparsable"}   # six random tokens define no solution
