"""Edge cases a task's statement defines reach every step's trials (issue 31, items 3 and 6).

Standard-normal inputs never hold an all-zero block and float32 logits never tie, so before edge cases
a candidate dividing by a zero scale, or keeping exactly K logits where the statement keeps every tie
at the k-th value, was judged correct at every world size and seed tried. Here each such bug is judged
wrong in every step, with feedback naming the case, and correct candidates (the reference and another
correct arrangement) stay correct in every step.
"""
from __future__ import annotations

import pytest
import torch
from conftest import VERDICTS, cpu_judge, variant

from pkb_env.contract import Edge, Normal, Output, Preset, Sharded, Sum, TaskSpec, Tensor, TaskError
from pkb_env.contract.edges import edge_of
from pkb_env.contract.mesh import SHARED, Mesh
from pkb_env.judge.seeds import SeedPlan
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import load_reward
from pkb_env.task import load_task

STEPS = 4
FP8 = "blocked_fp8_quantize"
TOPK = "vocab_parallel_log_prob_topk"




NO_ZERO_GUARD = variant(FP8, "divisor = torch.where(scale == 0, torch.ones_like(scale), scale)", "divisor = scale")
OTHER_ZERO_GUARD = variant(FP8, "divisor = torch.where(scale == 0, torch.ones_like(scale), scale)",
                           "divisor = scale.masked_fill(scale == 0, 1.0)")
EXACTLY_K = variant(TOPK, '''        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))''', '''        chosen = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
        kept = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, chosen, True)
        logits = logits.masked_fill(~kept, float("-inf"))''')
TIES_BY_SORT = variant(TOPK, '''        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]''', '''        kth = logits.sort(dim=-1, descending=True).values[..., min(top_k, logits.shape[-1]) - 1:][..., :1]''')


@pytest.fixture(scope="module", params=[2, 4])
def judge(request):
    """Verdicts only: what is tested here is which code is correct; a correct step is not timed."""
    with cpu_judge(request.param, VERDICTS) as service:
        service.open("all_reduce")
        yield service


def steps(judge, task: str, source: str) -> list[EvaluationRecord]:
    return [judge.judge(task, source) for _ in range(STEPS)]


@pytest.mark.parametrize("task,source,case,symptom", [
    (FP8, NO_ZERO_GUARD, "an all-zero block in rank ", "NaN or infinite where the reference is finite"),
    (TOPK, EXACTLY_K, "integer logits tied at the top-k boundary", "elements differ"),
], ids=["no-zero-guard", "exactly-k"])
def test_a_bug_on_an_edge_case_is_wrong_in_every_step(judge, task, source, case, symptom):
    for record in steps(judge, task, source):
        assert record.verdict.value == "wrong", record.feedback
        assert case in record.feedback and symptom in record.feedback, record.feedback


@pytest.mark.parametrize("task,source", [(FP8, None), (FP8, OTHER_ZERO_GUARD), (TOPK, None), (TOPK, TIES_BY_SORT)],
                         ids=["fp8-reference", "fp8-masked-fill", "topk-reference", "topk-kth-by-sort"])
def test_correct_code_stays_correct_on_the_edge_cases(judge, task, source):
    for record in steps(judge, task, source or load_task(task).reference_source):
        assert record.verdict.value == "correct", record.feedback


def test_a_judge_of_verdicts_only_times_nothing_and_says_so(judge):
    """JudgeConfig(timing=False): the correct step ends at its trials' check; the record, its feedback and the
    reward say that speed was not measured and why; the judge refuses to calibrate, naming the setting."""
    record = judge.judge(FP8, load_task(FP8).reference_source)
    assert record.verdict.value == "correct", record.feedback
    assert record.timing is None and record.roofline is None and record.timed_check is None
    assert not record.performance_available and record.speedup is None
    assert "time" not in record.stage_seconds and "roofline" not in record.stage_seconds
    assert "Performance not measured: this judge gives verdicts only" in record.feedback
    reward = load_reward("default")(record)
    assert reward.terms["performance"] == "unavailable" and "verdicts only" in reward.terms["reason"]
    assert reward.value == pytest.approx(reward.terms["base"])
    with pytest.raises(TaskError, match="timing=False"):
        judge.calibrate()


# -- the contract and the plan, in this process -----------------------------------------------------

def test_every_step_reaches_every_edge_case_at_secret_positions():
    spec = load_task(FP8)
    layout = spec.layout(4)
    positions = set()
    for secret in range(40):
        seeds, labels = SeedPlan(layout, secret=secret).trials(3, spec.edges)
        edges = [edge_of(seeds[0][k][SHARED], spec.edges) for k in range(3)]
        assert [e is not None for e in edges].count(True) == 1, labels
        k = next(k for k, e in enumerate(edges) if e is not None)
        positions.add(k)
        assert labels[k].startswith(f"trial {k} (an all-zero block in rank ")
        assert all(seeds[r][k][SHARED] == seeds[0][k][SHARED] for r in range(4))
        blocks = [spec.make_inputs(spec.input_context(r, 4, "tiny", "float32", "cpu", seeds[r][k]))[0]
                  .unflatten(-1, (-1, 128)).abs().amax(-1).eq(0).sum().item() for r in range(4)]
        assert sorted(blocks) == [0, 0, 0, 1], blocks  # one block of one rank, the one the label names
        assert blocks[int(labels[k].split("rank ")[1][0])] == 1
    assert positions == {0, 1, 2}, "the edge trial's position follows the secret"
    assert SeedPlan(layout, secret=5).trials(3, spec.edges) == SeedPlan(layout, secret=5).trials(3, spec.edges)


def test_one_call_in_two_is_an_edge_case():
    edges = load_task(TOPK).edges
    picked = [edge_of(seed, edges) is not None for seed in range(4000)]
    assert 0.45 < sum(picked) / len(picked) < 0.55


def _spec(**overrides) -> TaskSpec:
    fields = dict(name="t", title="t", description="t", family="tensor", pkb_id=None, origin="t",
                  inputs=(Tensor("x", ("W * M",), dist=Normal(), layout=Sharded(0)),),
                  outputs=(Output("y", ("M",)),), golden=lambda inputs, world: [], cost=lambda c: None,
                  tolerance_rule=Sum(1, 1, "dtype"), presets={"tiny": Preset({"M": 4}, "float32"),
                                                             "bench": Preset({"M": 4}, "bfloat16")},
                  dtypes=("float32", "bfloat16"), mesh=Mesh(("world", "W")))
    return TaskSpec(**{**fields, **overrides})


def test_an_edge_case_must_rewrite_a_tensor_input():
    with pytest.raises(TaskError, match="not a tensor or scalar input"):
        _spec(edges=(Edge("zeros", "z", lambda x, d: x, "zeros"),))
    spec = _spec(edges=(Edge("zeros", "x", lambda x, d: torch.zeros_like(x) if d.here else x, "zeros"),))
    seeds, labels = SeedPlan(spec.layout(2), secret=1).trials(2, spec.edges)
    k = next(k for k, label in enumerate(labels) if "zeros" in label)
    made = [spec.make_inputs(spec.input_context(r, 2, "tiny", "float32", "cpu", seeds[r][k]))[0] for r in range(2)]
    assert sorted(bool(m.eq(0).all()) for m in made) == [False, True]


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_call_with_the_iou_edge_case_tells_at_least_from_above_the_threshold(world_size):
    """sam3_allgather_iou_suppression's edge case puts pairs of objects at IoU exactly 0.7; their occlusion
    frames are drawn so that the rule decides each such pair (both >= 0 and different), so in every call
    with it, suppressing at IoU > 0.7 differs from >= (with uniform frames about 1 call in 5 at world size 2
    decided nothing there, and the `>` variant passed a step now and then)."""
    from pkb_env.contract.inputs import rank_seeds

    spec = load_task("sam3_allgather_iou_suppression")
    names = [d.name for d in spec.inputs]
    layout = spec.layout(world_size, spec.preset("tiny").dims)
    calls = 0
    for secret in range(120):
        seeds = [rank_seeds(secret, layout, rank, "edge") for rank in range(world_size)]
        edge = edge_of(seeds[0][SHARED], spec.edges)
        if edge is None or edge.name != "iou_at_threshold":   # plain, or the overlap chain
            continue
        calls += 1
        made = [dict(zip(names, spec.make_inputs(spec.input_context(rank, world_size, "tiny", "float32", "cpu",
                                                                    seeds[rank], groups=None))))
                for rank in range(world_size)]
        binary = torch.cat([m["low_res_masks_local"] for m in made]).flatten(1).gt(0).double()
        last = torch.cat([m["last_occluded_local"] for m in made])
        intersection = binary @ binary.T
        area = binary.sum(dim=1)
        iou = intersection / (area[:, None] + area[None, :] - intersection).clamp_min(1.0)
        at = torch.triu(iou == 0.7, diagonal=1).nonzero().tolist()
        assert at, f"call {secret}: no pair at IoU 0.7"
        assert all(last[i] >= 0 and last[j] >= 0 and last[i] != last[j] for i, j in at), (secret, at, last)
    assert calls >= 20
