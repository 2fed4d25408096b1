"""The model-backed agents: a tiny local transformers model, and an OpenAI-compatible stub server.

Nothing is downloaded and no real endpoint is contacted: the model is built from a config with a
tokenizer trained here, and the server is an http.server on 127.0.0.1 that answers only this test's
requests.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import gymnasium
import pytest

import pkb_env  # noqa: F401  (registers the env)
from pkb_env.agents import SYSTEM_PROMPT, build_messages, render_prompt
from conftest import FAST
from pkb_env.task import load_task

REFERENCE = load_task("all_reduce").reference_source
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
NO_SYSTEM_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                      "{{ raise_exception('System role not supported') }}{% endif %}"
                      "[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}[assistant] {% endif %}")
FAILURES = {"flagged", "unparsable", "build_error", "runtime_error", "wrong"}


def obs(prompt: str, task_id: str = "all_reduce") -> dict:
    return {"prompt": prompt, "task_id": task_id, "reference": REFERENCE, "feedback": "", "turn": 0}


@pytest.fixture(scope="module")
def env2():
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=2, executor="cpu",
                         config=FAST.replace(trials=1), max_turns=100)
    yield env
    env.close()


# ================================================================================================
# Messages
# ================================================================================================
class _PlainTokenizer:
    chat_template = None


def test_messages_are_system_then_the_prompt_verbatim():
    messages = build_messages(obs("# Task: all-reduce\nfeedback here"))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT and "```python" in SYSTEM_PROMPT
    assert messages[1]["content"] == "# Task: all-reduce\nfeedback here"
    assert build_messages(obs("p"), system_prompt=None) == [{"role": "user", "content": "p"}]
    with pytest.raises(ValueError, match="observation dict"):
        build_messages({"task_id": "all_reduce"})


def test_render_without_a_chat_template_is_plain_text():
    text = render_prompt(_PlainTokenizer(), [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert text == "System: S\n\nUser: U\n\nAssistant:"


def test_render_with_a_chat_template(tokenizer):
    text = render_prompt(tokenizer, build_messages(obs("hello")))
    assert text == f"<|system|>\n{SYSTEM_PROMPT}\n<|user|>\nhello\n<|assistant|>\n"


def test_render_folds_the_system_message_for_templates_without_one(tokenizer):
    tokenizer.chat_template = NO_SYSTEM_TEMPLATE
    text = render_prompt(tokenizer, [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert text == "[user] S\n\nU\n[assistant] "


def test_importing_agents_does_not_import_transformers():
    code = ("import sys, pkb_env.agents as a\n"
            "assert 'transformers' not in sys.modules\n"
            "a.OpenAIAgent\n"
            "assert 'transformers' not in sys.modules\n"
            "assert a.TransformersAgent.__name__ == 'TransformersAgent'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ================================================================================================
# TransformersAgent: a tiny Llama with random weights and a byte-level BPE trained here
# ================================================================================================
def _train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([REFERENCE, SYSTEM_PROMPT, "Write a faster multi-rank all-reduce.\n"], trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def _tokenizer_json():
    return _train_tokenizer().to_str()


@pytest.fixture
def tokenizer(_tokenizer_json):
    """A fresh tokenizer per test (agents may set its pad token): no pad token, a chat template."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_tokenizer_json),
                                  bos_token="<s>", eos_token="</s>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def model(_tokenizer_json):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=_train_tokenizer().get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=64,
                         max_position_embeddings=8192, bos_token_id=1, eos_token_id=2,
                         initializer_range=0.5)  # peaked logits: greedy choices are not near-ties
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _agent(model, tokenizer, **kwargs):
    from pkb_env.agents import TransformersAgent

    kwargs.setdefault("max_new_tokens", 8)
    return TransformersAgent(model, tokenizer, **kwargs)


def test_act_returns_only_the_continuation(model, tokenizer):
    agent = _agent(model, tokenizer, do_sample=False)
    assert tokenizer.pad_token == "</s>"  # fallback to eos
    text = agent.act(obs("def solution(tensor):"))
    assert isinstance(text, str) and text
    assert SYSTEM_PROMPT not in text and "<|assistant|>" not in text
    assert agent.act(obs("def solution(tensor):")) == text  # greedy is deterministic
    assert agent.prompts([obs("x")]) == [f"<|system|>\n{SYSTEM_PROMPT}\n<|user|>\nx\n<|assistant|>\n"]


def test_act_batch_shapes_and_left_padding(model, tokenizer):
    agent = _agent(model, tokenizer, do_sample=False)
    short, long = obs("all-reduce"), obs("Write a faster multi-rank all-reduce.\n" * 6)
    groups = agent.act_batch([short, long], num_samples=3)
    assert [len(g) for g in groups] == [3, 3]
    assert all(isinstance(t, str) for g in groups for t in g)
    assert len(set(groups[0])) == 1 and len(set(groups[1])) == 1  # greedy: every sample alike
    # Left padding with a mask: the short prompt, padded in the batch, generates what it does alone.
    assert groups[0][0] == agent.act(short) and groups[1][0] == agent.act(long)
    assert tokenizer.padding_side == "right"  # restored
    assert agent.act_batch([], num_samples=2) == []
    with pytest.raises(ValueError, match="num_samples"):
        agent.act_batch([short], num_samples=0)


def test_sampling_is_reproducible_with_a_seed(model, tokenizer):
    observations = [obs("all-reduce"), obs("reduce")]
    first = _agent(model, tokenizer, seed=7, temperature=1.0).act_batch(observations, num_samples=3)
    again = _agent(model, tokenizer, seed=7, temperature=1.0).act_batch(observations, num_samples=3)
    assert first == again
    assert len(set(first[0])) > 1  # samples of a group differ


def test_plain_prompt_without_a_chat_template(model, tokenizer):
    tokenizer.chat_template = None
    agent = _agent(model, tokenizer, do_sample=False)
    assert agent.prompts([obs("x")]) == [f"System: {SYSTEM_PROMPT}\n\nUser: x\n\nAssistant:"]
    assert isinstance(agent.act(obs("x")), str)


def test_bad_settings_say_the_fix(model, tokenizer):
    with pytest.raises(ValueError, match="do_sample=False"):
        _agent(model, tokenizer, temperature=0.0)


def test_tiny_model_steps_the_real_env(model, tokenizer, env2):
    ob, _ = env2.reset(seed=0, options={"task": "all_reduce"})
    agent = _agent(model, tokenizer, max_new_tokens=16, seed=0)
    action = agent.act(ob)
    start = time.perf_counter()
    ob2, reward, terminated, truncated, info = env2.step(action)
    assert time.perf_counter() - start < 15
    assert info["verdict"] in FAILURES and not info["correct"], info["feedback"]
    assert not terminated and reward < 0
    assert ob2["turn"] == 1 and ob2["feedback"]


# ================================================================================================
# OpenAIAgent against a stub server
# ================================================================================================
KEY = "sk-test-123"


def completion_body(texts: list[str]) -> bytes:
    return json.dumps({"id": "cmpl-1", "object": "chat.completion", "model": "stub",
                       "choices": [{"index": i, "message": {"role": "assistant", "content": t},
                                    "finish_reason": "stop"} for i, t in enumerate(texts)]}).encode()


def answer(text_for):
    """A reply that answers n choices, choice i being text_for(request, i)."""
    return lambda req: (200, completion_body([text_for(req, i) for i in range(req["json"]["n"])]))


def solution_reply(req, i):
    return f"Sample {i}: this calls the collective.\n```python\n{REFERENCE}```\nDone."


@contextmanager
def stub_server(*replies):
    """Serves one request per reply (a function request -> (status, body bytes[, headers])), then stops.

    Yields (base_url, requests): each request as {"path", "headers", "json"}.
    """
    requests: list[dict] = []
    queue = list(replies)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            req = {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
            requests.append(req)
            status, payload, *headers = queue.pop(0)(req)
            try:
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (timeout test)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.timeout = 10  # handle_request gives up if a request never comes

    def serve():
        for _ in range(len(replies)):
            server.handle_request()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", requests
    finally:
        thread.join(timeout=15)
        server.server_close()


def _openai(base_url, **kwargs):
    from pkb_env.agents import OpenAIAgent

    kwargs.setdefault("backoff_s", 0.01)
    return OpenAIAgent(base_url=base_url, model="stub-model", api_key=KEY, **kwargs)


def test_openai_request_and_results_then_judged_correct(env2):
    ob, _ = env2.reset(seed=0, options={"task": "all_reduce"})
    second = obs("another prompt")
    with stub_server(answer(solution_reply), answer(lambda req, i: f"{req['json']['messages'][-1]['content']} #{i}"),
                     answer(lambda req, i: f"{req['json']['messages'][-1]['content']} #{i}")) as (url, requests):
        agent = _openai(url + "/", temperature=0.5, top_p=0.9, max_tokens=256, concurrency=2)
        action = agent.act(ob)
        groups = agent.act_batch([obs("first prompt"), second], num_samples=3)

    assert [r["path"] for r in requests] == ["/v1/chat/completions"] * 3
    req = requests[0]
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    body = req["json"]
    assert body["model"] == "stub-model" and body["n"] == 1 and body["temperature"] == 0.5
    assert body["top_p"] == 0.9 and body["max_tokens"] == 256
    assert body["messages"] == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": ob["prompt"]}]
    assert sorted(r["json"]["n"] for r in requests[1:]) == [3, 3]
    assert groups == [[f"first prompt #{i}" for i in range(3)], [f"another prompt #{i}" for i in range(3)]]
    assert KEY not in repr(agent)

    _, reward, terminated, _, info = env2.step(action)
    assert info["verdict"] == "correct", info["feedback"]
    assert info["correct"] and reward > 0


def test_openai_retries_a_server_error():
    with stub_server(lambda req: (500, b'{"error": "overloaded"}'), answer(solution_reply)) as (url, requests):
        text = _openai(url, retries=2).act(obs("p"))
    assert len(requests) == 2 and "def solution" in text


def test_openai_gives_up_after_the_retries():
    busy = lambda req: (429, b"slow down", {"Retry-After": "0"})
    with stub_server(busy, busy) as (url, requests):
        with pytest.raises(RuntimeError, match=r"after 2 attempts: HTTP 429 .*slow down"):
            _openai(url, retries=1).act(obs("p"))
    assert len(requests) == 2


def test_openai_401_is_not_retried_and_hides_the_key():
    reply = lambda req: (401, json.dumps({"error": f"invalid key {KEY}" + "x" * 1000}).encode())
    with stub_server(reply) as (url, requests):
        with pytest.raises(RuntimeError, match="HTTP 401") as caught:
            _openai(url, retries=2).act(obs("p"))
    message = str(caught.value)
    assert len(requests) == 1
    assert "OPENAI_API_KEY" in message and "invalid key" in message and KEY not in message
    assert len(message) < 600  # the body is cut at 300 characters


def test_openai_timeout():
    release = threading.Event()

    def slow(req):
        release.wait(5)
        return 200, completion_body(["late"])

    with stub_server(slow) as (url, _):
        start = time.perf_counter()
        with pytest.raises(RuntimeError, match=r"timed out after 0.3s"):
            _openai(url, timeout=0.3).act(obs("p"))
        assert time.perf_counter() - start < 3
        release.set()


def test_openai_malformed_replies():
    with stub_server(lambda req: (200, b"<html>not an API</html>"), lambda req: (200, b'{"object": "list"}')) as (url, _):
        agent = _openai(url)
        with pytest.raises(RuntimeError, match="not JSON.*<html>not an API"):
            agent.act(obs("p"))
        with pytest.raises(RuntimeError, match="no 'choices' list"):
            agent.act(obs("p"))


def test_openai_fewer_choices_than_asked_are_topped_up():
    with stub_server(lambda req: (200, completion_body(["a"])), lambda req: (200, completion_body(["b", "c"]))) as (url, requests):
        assert _openai(url).act_batch([obs("p")], num_samples=3) == [["a", "b", "c"]]
    assert [r["json"]["n"] for r in requests] == [3, 2]


def test_openai_configuration_from_the_environment(monkeypatch):
    from pkb_env.agents import OpenAIAgent

    for name in ("PKB_OPENAI_BASE_URL", "OPENAI_BASE_URL", "PKB_OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="PKB_OPENAI_BASE_URL"):
        OpenAIAgent()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")
    with pytest.raises(ValueError, match="PKB_OPENAI_MODEL"):
        OpenAIAgent()
    monkeypatch.setenv("PKB_OPENAI_MODEL", "m")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIAgent()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    agent = OpenAIAgent()
    assert agent.url == "http://127.0.0.1:9/v1/chat/completions" and agent.model == "m"
