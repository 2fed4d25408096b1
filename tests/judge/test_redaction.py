"""The judge user's secrets never reach the feedback, the record or the wandb log (issue 11, Deliver 3).

A candidate is given no way to read a secret (tests/sandbox/test_file_access.py); here it knows the values anyway (as if a
policy had learned them) and puts them into an exception, its stdout and its outputs. Nothing that
reaches the policy, `record.to_dict()` or the offline wandb run may hold one.
"""
import json
import secrets

import pytest

from conftest import FAST
from pkb_env.redaction import REDACTED, Redactor


def test_what_counts_and_how_short_values_are_treated(tmp_path):
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password netrc-pass-123456\n")
    (tmp_path / ".cache" / "huggingface").mkdir(parents=True)
    (tmp_path / ".cache" / "huggingface" / "token").write_text("hf_file_token_abcdef\n")
    environ = {"WANDB_API_KEY": "w" * 40, "AWS_REGION": "us-east-9x", "AZURE_CLIENT_ID": "abcd1234efgh",
               "MY_SERVICE_TOKEN": "pin7", "GOOGLE_OK": "on", "PATH": "/usr/bin:/bin"}
    redactor = Redactor.of_judge(environ, str(tmp_path))
    text = ("key " + "w" * 40 + " region us-east-9x id abcd1234efgh netrc-pass-123456 hf_file_token_abcdef "
            "pin7 pin77 spin7 on only /usr/bin:/bin")
    redacted = redactor.redact(text)
    for secret in ("w" * 40, "us-east-9x", "abcd1234efgh", "netrc-pass-123456", "hf_file_token_abcdef"):
        assert secret not in redacted
    # 4-7 characters: only where the value stands alone; under 4: never (it would blank ordinary text).
    assert " [redacted] pin77 spin7 on only /usr/bin:/bin" in redacted, redacted
    assert redactor.redact({"k": ["x" + "w" * 40, ("w" * 40,)]}) == {"k": ["x" + REDACTED, (REDACTED,)]}
    assert not Redactor.of_judge({}, str(tmp_path / "nowhere"))


@pytest.fixture
def secret_judge(tmp_path, monkeypatch):
    values = {name: f"{name.lower()}-{secrets.token_hex(12)}" for name in ("WANDB_API_KEY", "HF_TOKEN", "OPENAI_API_KEY")}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "home"
    home.mkdir()
    values["netrc"] = "netrc-" + secrets.token_hex(12)
    (home / ".netrc").write_text(f"machine api.wandb.ai login user password {values['netrc']}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_MODE", "offline")
    return values


def test_secrets_in_exceptions_stdout_and_outputs_are_redacted(secret_judge, tmp_path):
    import gymnasium

    from pkb_env.entrypoints.gym.wandb import WandbLogger

    values = secret_judge
    base = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=2, executor="cpu",
                          max_turns=10, config=FAST)
    env = WandbLogger(base, project="pkb-env-test", name="redaction", dir=tmp_path / "runs")
    loud = f'''import torch
def solution(tensor):
    print("stdout carries {values['WANDB_API_KEY']}", flush=True)
    raise RuntimeError("the exception carries {values['HF_TOKEN']} and {values['netrc']}")
'''
    keyed = f'''import torch
def solution(tensor):
    return {{"{values['OPENAI_API_KEY']}": tensor.clone()}}
'''
    texts = []
    try:
        env.reset(seed=0)
        for code in (loud, keyed):
            _, _, _, _, info = env.step(code)
            assert info["verdict"] in ("runtime_error", "wrong"), info["feedback"]
            assert REDACTED in info["feedback"], info["feedback"]  # the secret was there, and was cut
            texts += [info["feedback"], json.dumps(info["record"].to_dict())]
    finally:
        env.close()
    from doors.test_wandb_logging import finished_log, run_directory

    run_dir = run_directory(tmp_path / "runs")
    finished_log(run_dir)  # wandb-core writes in its own process: wait until the log is complete
    logged = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
    assert b"solution" in logged, "the kernels table (the code) was logged"
    for value in values.values():
        for text in texts:
            assert value not in text, f"{value} reached the policy or the record"
        assert value.encode() not in logged, f"{value} reached the wandb log"
