"""Feedback a model can act on (issue 47, rows 5 and 8): a rank's writes past the file-size cap name the cap and the
fix (and the prompt's rules state it); rows in the wrong order are called a permutation; state the task updates in
place that the candidate never wrote is called untouched; the headline of a wrong step says what its details say.
One judge on CPU ranks (world size 2) serves the module."""
from __future__ import annotations

import pytest

import torch

from conftest import FAST, variant
from pkb_env.client import LocalClient
from pkb_env.contract import EXACT
from pkb_env.judge.compare import compare_outputs
from pkb_env.record import Verdict


@pytest.fixture(scope="module")
def client():
    with LocalClient(FAST.replace(executor="cpu", world_size=2)) as client:
        yield client


def test_output_past_the_cap_names_the_cap_and_the_fix(client):
    printing = "def solution(tensor):\n    print('x' * (65 << 20))\n    return tensor.clone()\n"
    record = client.submit("all_reduce", printing).result()
    assert record.verdict is Verdict.RUNTIME_ERROR, record.feedback
    assert "File too large (a rank may write at most 64 MiB to any one file, and what it prints goes to one" \
        in record.feedback, record.feedback
    assert "print a summary, not whole tensors" in record.feedback


def test_the_rules_state_the_cap(client):
    prompt = client.observation("all_reduce")["prompt"]
    assert "at most 64 MiB written to any one file, printed output (stdout and stderr)\n  included" in prompt


def test_rows_in_the_wrong_order_are_called_a_permutation(client):
    reversed_rows = variant("all_gather", "return out.view(world, *tensor.shape)",
                            "return out.view(world, *tensor.shape).flip(0)")
    record = client.submit("all_gather", reversed_rows).result()
    assert record.verdict is Verdict.WRONG
    assert record.feedback.startswith("WRONG: the outputs hold the right values in the wrong order."), record.feedback
    assert "the rows (dim 0) are a permutation of the expected ones: every one is right, 2 of 2 are in other " \
           "places (the first at index 0)" in record.feedback
    assert {m.kind for m in record.verify.mismatches} == {"permuted"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int64])
def test_a_permutation_is_told_from_wrong_values_in_every_dtype(dtype):
    expected = torch.randn(6, 4, generator=torch.Generator().manual_seed(0)).mul(8).to(dtype)
    [moved] = compare_outputs(expected, expected[[1, 0, 2, 3, 5, 4]], EXACT, "trial 0", 0)
    assert moved.kind == "permuted" and "4 of 6 are in other places (the first at index 0)" in moved.message
    [wrong] = compare_outputs(expected, expected[:, [3, 2, 1, 0]], EXACT, "trial 0", 0)   # columns: no row order
    assert wrong.kind == "value" and "permutation" not in wrong.message


def test_state_never_updated_in_place_is_called_untouched(client):
    new_tensors = variant("ddp", "        p.sub_(lr * (m / bc1) / ((v / bc2).sqrt() + eps))",
                          "        p = p - lr * (m / bc1) / ((v / bc2).sqrt() + eps)")   # the moments stay right
    record = client.submit("ddp", new_tensors).result()
    assert record.verdict is Verdict.WRONG, record.feedback
    assert record.feedback.startswith("WRONG: state the task updates in place was left as given."), record.feedback
    assert "updated['W1'] still holds its input value: the call never updated it in place" in record.feedback
    assert {m.path for m in record.verify.mismatches} == {f"updated[{n!r}]" for n in ("W1", "b1", "W2", "b2")}
    assert {m.kind for m in record.verify.mismatches} == {"untouched"}


def test_the_headline_of_an_input_mutating_candidate_says_so(client):
    in_place = ("import torch.distributed as dist\ndef solution(tensor):\n    dist.all_reduce(tensor)\n"
                "    return tensor\n")
    record = client.submit("all_reduce", in_place).result()
    assert record.verdict is Verdict.WRONG
    headline = record.feedback.splitlines()[0]
    assert headline == "WRONG: an output is a view of an input, not a new tensor; the call modified its inputs.", \
        record.feedback
    assert "outputs differ" not in headline and "is a view of an input argument" in record.feedback


def test_values_that_differ_keep_the_plain_headline(client):
    record = client.submit("all_reduce", "def solution(tensor):\n    return tensor.clone()\n").result()
    assert record.feedback.startswith("WRONG: outputs differ from the reference."), record.feedback
