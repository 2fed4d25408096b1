"""`data sft` and `data pairs` train on replies in the form their own system prompt demands (issue 47, row 6): one
```python block holding the module. Bare code (what the reference and file agents submit) is fenced; a completion
that is one fenced block already stays as the model wrote it; one that parsed to nothing stays too."""
import pytest

from pkb_env.agents import SYSTEM_PROMPT
from pkb_env.data.recipes import assistant_reply, preference_pairs, sft_rows
from pkb_env.judge.parse import parse_action

BARE = "import torch\n\n\ndef solution(tensor):\n    return tensor.clone()\n"
SHOWS_A_FENCE = 'def solution(tensor):\n    """Like\n    ```python\n    x\n    ```\n    """\n    return tensor\n'


def row(code_hash, completion, code, correct, speedup=None):
    return {"task": "all_reduce", "prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                                             {"role": "user", "content": "# Task: all_reduce"}],
            "completion": completion, "code": code, "code_hash": code_hash, "correct": correct,
            "verdict": "correct" if correct else "wrong", "speedup": speedup, "roofline_fraction": None, "count": 1,
            "agent": "reference"}


@pytest.mark.parametrize("completion, code", [(BARE, BARE), (SHOWS_A_FENCE, SHOWS_A_FENCE),
                                               ("Two tries.\n```python\nx = 1\n```\n```python\n" + BARE + "```", BARE)])
def test_a_reply_is_one_fenced_block_holding_the_judged_module(completion, code):
    reply = assistant_reply(completion, code)
    parsed = parse_action(reply)
    assert parsed.from_fence and parsed.code.strip() == code.strip(), reply
    assert reply.startswith("```") and reply.rstrip().endswith("```")


def test_a_reply_that_is_one_block_already_stays_as_written():
    written = "The ring is faster.\n```python\n" + BARE + "```\nDone."
    assert assistant_reply(written, BARE) == written
    assert assistant_reply("no code at all", None) == "no code at all"


def test_sft_and_pairs_write_fenced_replies():
    rows = [row("a", BARE, BARE, True, 1.2), row("b", "def solution(tensor):\n    return tensor\n",
                                                "def solution(tensor):\n    return tensor\n", False)]
    [sft] = sft_rows(rows)
    assert sft["messages"][-1] == {"role": "assistant", "content": "```python\n" + BARE.rstrip() + "\n```"}
    [pair] = preference_pairs(rows)
    for side in ("chosen", "rejected"):
        assert parse_action(pair[side][0]["content"]).from_fence, pair[side]


def test_data_export_defaults_to_its_one_format(tmp_path, capsys):
    from pkb_env.entrypoints.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["data", "export", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "holds no rows" in err and "--format" not in err   # refused for its data, not for a missing option
