"""Alternative algorithms are judged correct; wrong ones are judged wrong with a message saying where."""
import pytest

from pkb_env import solutions
from pkb_env.rewards import load_reward

REWARD = load_reward("default")   # the env's

RING = solutions.read("examples", "all_reduce_ring")

WRONG = {
    "off_by_one_rank": ("""
import torch, torch.distributed as dist
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    if dist.get_rank() == 2:
        out += tensor
    return out
""", ["rank 2", "elements differ"]),
    "wrong_dtype": ("""
import torch, torch.distributed as dist
def solution(tensor):
    out = tensor.double()
    dist.all_reduce(out)
    return out
""", ["dtype"]),
    "wrong_shape": ("""
import torch, torch.distributed as dist
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out.reshape(-1)
""", ["shape"]),
    "mutated_input": ("""
import torch.distributed as dist
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    tensor.zero_()
    return out
""", ["modified argument[0]"]),
    "returns_input_view": ("""
import torch.distributed as dist
def solution(tensor):
    dist.all_reduce(tensor)
    return tensor.view(tensor.shape)
""", ["view of an input"]),
    "returns_none": ("""
def solution(tensor):
    return None
""", ["rank 0"]),
}


def test_ring_all_reduce_is_correct(judge4):
    record = judge4.judge("all_reduce", RING)
    assert record.correct, record.feedback
    assert record.speedup > 0 and REWARD(record).value > 0
    assert any(f.code.startswith("uses_collectives") for f in record.flags)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_candidates_are_wrong_and_say_where(judge4, name):
    code, phrases = WRONG[name]
    record = judge4.judge("all_reduce", code)
    assert record.verdict.value == "wrong", record.feedback
    assert record.stage.value == "verify" and not record.correct
    assert record.speedup is None  # wrong code is never timed
    for phrase in phrases:
        assert phrase in record.feedback, record.feedback
    assert REWARD(record).value == pytest.approx(-0.2)


def test_timed_outputs_are_checked_cache_after_first_call(judge4):
    """Correct on the trials, then replays its first timed output: caught by the timed-output check."""
    code = """
import torch.distributed as dist
_calls = [0]
_cache = {}
def solution(tensor):
    _calls[0] += 1
    if _calls[0] > 2 and "out" in _cache:
        return _cache["out"].clone()
    out = tensor.clone()
    dist.all_reduce(out)
    _cache["out"] = out
    return out
"""
    record = judge4.judge("all_reduce", code)
    assert record.verdict.value == "wrong" and record.stage.value == "time", record.feedback
    assert "timed call" in record.feedback


def test_broadcast_alternative_send_recv_is_correct(judge4):
    code = """
import torch, torch.distributed as dist
def solution(tensor, src):
    rank, world = dist.get_rank(), dist.get_world_size()
    out = tensor.clone()
    if rank == src:
        reqs = [dist.isend(out, peer) for peer in range(world) if peer != src]
        for r in reqs:
            r.wait()
    else:
        dist.recv(out, src)
    return out
"""
    record = judge4.judge("broadcast", code)
    assert record.correct, record.feedback
