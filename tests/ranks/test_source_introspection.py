"""Libraries that read a candidate's source (torch.jit.script, inspect.getsource) get it on every rank, every step.

TorchScript compiles a function from its source text (`inspect.getsource`), so the candidate module must be
readable through `inspect`/`linecache` on each rank. Every rank of a rank set works in one directory, and each
used to write the candidate to the same `candidate.py` there: a rank whose TorchScript read the file while a
peer had just truncated it to write it again got `OSError: Can't get source`, a build error on a different
rank each time (PKB's three `@torch.jit.script` references: 3 of 8 runs at world size 4, issue 42).
"""
from __future__ import annotations

import inspect
import sys

import pytest
import torch

from pkb_env.ranks.server import load_candidate

STEPS = 10

SCRIPTED = '''
import dataclasses
import functools
import inspect
import typing

import torch
import torch.distributed as dist


@torch.jit.script
def _halve_then_double(x: torch.Tensor) -> torch.Tensor:
    y = x * 0.5
    return y + y


@dataclasses.dataclass(frozen=True)
class _Plan:
    world: int
    rank: int


@functools.singledispatch
def _world(group: object) -> int:
    return dist.get_world_size()


def solution(tensor):
    plan = _Plan(_world(None), dist.get_rank())
    assert typing.get_type_hints(_Plan)["world"] is int
    assert "def solution(tensor)" in inspect.getsource(solution)
    out = _halve_then_double(tensor)
    dist.all_reduce(out)
    return out
'''


def test_a_torchscript_helper_builds_and_is_correct_on_every_rank_in_every_step(verdicts4):
    verdicts = []
    for _ in range(STEPS):
        record = verdicts4.judge("all_reduce", SCRIPTED)
        verdicts.append(record.verdict.value if record.verdict.value == "correct" else record.feedback[:600])
    assert verdicts == ["correct"] * STEPS, verdicts


PLAIN = """
import torch
def _double(x: torch.Tensor) -> torch.Tensor:
    return x + x
def solution(x):
    return _double(x)
"""


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_what_inspect_reads_is_what_was_compiled_though_the_file_changes(tmp_path, monkeypatch):
    """The race, made certain: the rank's file emptied after its load (as a peer's rewrite did) and TorchScript
    still compiles the module's function from the text that was loaded."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "candidate", None)  # load_candidate registers its module; put back after
    solution = load_candidate(PLAIN, rank=3)
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == ["rank3.candidate.py"]  # a file of the rank's own
    files[0].write_text("")
    helper = solution.__globals__["_double"]
    assert inspect.getsource(helper).startswith("def _double(x: torch.Tensor)")
    assert torch.equal(torch.jit.script(helper)(torch.ones(2)), torch.full((2,), 2.0))
