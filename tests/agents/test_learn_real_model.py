"""The real-model recipe (agents/learn_real_model.py) on a tiny random Llama built from a config: the loop, the
episode dataset, the logs and the held-out bookkeeping, and the update's loss on the replies' tokens. The real
model's run is the recipe's own command (docs/training.md), a benchmark, not a test."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import FAST
from pkb_env.agents.learn_real_model import main, parse_args, prompt_ids, reply_losses, sft
from pkb_env.agents.train_grpo import make_tiny_model, make_tiny_tokenizer
from pkb_env.client import LocalClient
from pkb_env.data import read_rows
from pkb_env.task import load_task

REFERENCE = load_task("all_reduce").reference_source


@pytest.fixture(scope="module")
def client():
    client = LocalClient(FAST.replace(world_size=2, executor="cpu"))
    try:
        yield client
    finally:
        client.close()


def test_tiny_run_logs_every_round_measures_held_out_tasks_and_records_every_step(tmp_path, client):
    summary = main(["--tiny", "--rounds", "2", "--k", "2", "--eval-k", "1", "--train-tasks", "all_reduce",
                    "--heldout-tasks", "broadcast", "--demos", "reference", "--log-dir", str(tmp_path), "--track"],
                   client=client)
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "summary.json").read_text())["rounds"] == json.loads(json.dumps(summary["rounds"]))
    logged = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [m["step"] for m in logged] == [0, 1, 2, 3]   # held out before, 2 rounds, held out after
    before, first, after = logged[0], logged[1], logged[3]
    assert before["heldout/pass@1"] == summary["heldout_before"]["pass@1"]
    assert after["heldout/mean_reward"] == summary["heldout_after"]["mean_reward"]
    for key in ("train/pass@1", "train/mean_reward", "train/reward_terms/base", "train/all_reduce/pass@1",
                "sample_s", "judge_s", "sft/sft_rows"):
        assert key in first, key
    # a random model writes no module: every sample unparsable, and the reward says so
    assert first["train/verdict/unparsable"] == 1.0 and first["train/mean_reward"] == pytest.approx(-0.8)
    assert summary["rounds"][0]["sft_rows"] == 0
    # the demonstrations were learnt from (the update lowers their loss)
    assert summary["demos"]["loss_last"] < summary["demos"]["loss_first"]
    # every judged step is a row; the held-out ones only on held-out tasks, under held-out episode ids
    rows = read_rows(run / "episodes")
    assert sum(r["count"] for r in rows) == 2 * 2 + 2 * 1
    assert {r["task"] for r in rows if "-heldout-" in r["episode_id"]} == {"broadcast"}
    assert {r["task"] for r in rows if "-heldout-" not in r["episode_id"]} == {"all_reduce"}
    assert all(r["reward"] == pytest.approx(-0.8) and r["prompt"] for r in rows)
    assert list((run / "wandb").glob("offline-run-*")), "--track without a key logs offline under the run folder"


def test_reply_loss_is_the_full_sequence_loss_and_ignores_padding():
    """The prompt encoded once without gradient gives the same loss as one forward pass over prompt and reply; a
    shorter reply's padding in the batch changes nothing."""
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(tokenizer, seed=0).eval()
    asked = [{"role": "user", "content": "Write all_reduce for 2 ranks."}]
    long = asked + [{"role": "assistant", "content": f"```python\n{REFERENCE}```"}]
    short = asked + [{"role": "assistant", "content": "No."}]
    with torch.no_grad():
        both = reply_losses(model, tokenizer, [long, short])
        alone = torch.cat([reply_losses(model, tokenizer, [long]), reply_losses(model, tokenizer, [short])])
        prompt = prompt_ids(tokenizer, asked, model.device)
        reply = tokenizer(long[-1]["content"] + tokenizer.eos_token, return_tensors="pt",
                          add_special_tokens=False).input_ids
        logits = model(input_ids=torch.cat([prompt, reply], 1)).logits[0, prompt.shape[1] - 1:-1]
        full = torch.nn.functional.cross_entropy(logits, reply[0])
    assert torch.allclose(both, alone, atol=1e-5), (both, alone)
    assert both[0].item() == pytest.approx(full.item(), abs=1e-5)


def test_sft_lowers_the_loss_of_the_kept_reply():
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(tokenizer, seed=0)
    chat = [{"role": "user", "content": "Write all_reduce for 2 ranks."},
            {"role": "assistant", "content": f"```python\n{REFERENCE}```"}]
    with torch.no_grad():
        before = reply_losses(model, tokenizer, [chat]).item()
    losses = sft(model, tokenizer, [{"messages": chat}], parse_args(["--tiny", "--sft-epochs", "10"]))
    with torch.no_grad():
        after = reply_losses(model, tokenizer, [chat]).item()
    assert len(losses) == 10 and after < before - 1.0, (before, after)


def test_prompts_decoded_together_get_what_each_gets_alone():
    """sample() decodes several prompts of different lengths in one batch (caches left-padded, padding masked):
    greedy, each prompt's completions are those it gets alone."""
    from pkb_env.agents.learn_real_model import sample

    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(tokenizer, seed=3)
    args = parse_args(["--tiny", "--temperature", "0"])
    short = [{"role": "user", "content": "Write all_reduce."}]
    long = [{"role": "user", "content": "Write all_gather for 2 ranks; the reference follows.\n" + REFERENCE}]
    together = sample(model, tokenizer, [short, long], 2, args)
    alone = [sample(model, tokenizer, [chat], 2, args)[0] for chat in (short, long)]
    assert together == alone
    assert together[0] != together[1]
