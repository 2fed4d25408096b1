"""Contract v3, the output side, judged end to end on CPU ranks (docs/task_contract.md, "Outputs" to "What the
timed-output check covers").

The tasks are example specs outside the suite (tests/contract_v3_tasks/, addressed by their dotted path):
an Adam step whose state is updated in place, with a Python float, a slot that is
always None and a dict on rank 0 only; a real FFT with a complex output; an MoE-style dispatch with
variable-length outputs under a bound, float rows in any order keyed by ids, and top-k indices with a
stated tie rule. Each: the reference equals its golden; the reference and another correct arrangement are
judged correct; each kind of wrong answer is judged wrong with feedback that names where. One rank set
(W = 2) serves the module.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from conftest import cpu_judge, examples_importable, variant
from tasks.test_golden import check_golden, launch, rank_server

from pkb_env.contract import (Check, Comm, Cost, Fft, InPlace, OnRanks, Output, PerRank, Preset, Replicated, Sum,
                              TaskError, TaskSpec, Tensor, Tolerance)
from pkb_env.judge.compare import compare_outputs
from pkb_env.judge.fingerprints import compare_burst
from pkb_env.ranks.fingerprints import fingerprint_calls
from pkb_env.task import load_task

ADAM, RFFT, DISPATCH = "contract_v3_tasks.adam_step", "contract_v3_tasks.rfft", "contract_v3_tasks.dispatch"
TASKS = (ADAM, RFFT, DISPATCH)


@pytest.fixture(scope="module")
def judge():
    with examples_importable():
        service = cpu_judge(2)
    with service:
        service.open(ADAM)
        yield service


def assert_correct(judge, task: str, *sources: str) -> None:
    """The task's reference and each other correct arrangement are judged correct."""
    for source in (load_task(task).reference_source, *sources):
        record = judge.judge(task, source)
        assert record.verdict.value == "correct", record.feedback






def test_the_references_equal_their_goldens():
    with rank_server(), tempfile.TemporaryDirectory(prefix="pkb_contract_") as tmp:
        ranks = launch(2, Path(tmp), only=TASKS)
    for task in TASKS:
        check_golden(ranks, task, 2, "float32")


# -- state updated in place, scalars, None, dicts on a set of ranks, identical replicas ---------------------

NO_BIAS_CORRECTION = variant(ADAM, "(exp_avg / (1 - beta1 ** step))", "exp_avg")
MODIFIES_GRAD = variant(ADAM, "g = grad.clone()", "g = grad")
REPLICAS_DRIFT = variant(ADAM, "    param.sub_(update)\n", "    param.sub_(update)\n    if dist.get_rank() == 1:\n"
                         "        param.copy_(torch.nextafter(param, torch.full_like(param, float('inf'))))\n")
STATS_EVERYWHERE = variant(ADAM, "if dist.get_rank() == 0:", "if True:")
MISSING_KEY = variant(ADAM, '{"clipped": int(norm > max_norm), ', "{")
STALE_IN_TIMED_CALLS = variant(ADAM, "    exp_avg.mul_(beta1).add_(g, alpha=1 - beta1)\n",
                               "    CALLS.append(1)\n    m = exp_avg * beta1 + (1 - beta1) * g\n"
                               "    if len(CALLS) <= 2:\n        exp_avg.copy_(m)\n    exp_avg = m\n"
                               ).replace("def solution", "CALLS = []\n\n\ndef solution")
ADDCDIV = variant(ADAM, "    update = lr * (exp_avg / (1 - beta1 ** step)) / denom\n    param.sub_(update)\n",
                  "    update = lr * (exp_avg / (1 - beta1 ** step)) / denom\n"
                  "    param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))\n")


def test_state_updated_in_place_is_compared_after_the_call(judge):
    assert_correct(judge, ADAM, ADDCDIV)


@pytest.mark.parametrize("source,where", [
    (NO_BIAS_CORRECTION, "updated['param']"),
    (MODIFIES_GRAD, "the call modified argument[1]"),
    (REPLICAS_DRIFT, "differs bit for bit from rank 0's updated['param']"),
    (STATS_EVERYWHERE, "output[2]: expected None"),
    (MISSING_KEY, "missing keys ['clipped']"),
    (STALE_IN_TIMED_CALLS, "timed call 0 of burst 0, updated['exp_avg']"),
], ids=["no-bias-correction", "modifies-grad", "replicas-drift", "stats-everywhere", "missing-key", "stale-timed"])
def test_wrong_state_and_structure_are_judged_wrong_where(judge, source, where):
    record = judge.judge(ADAM, source)
    assert record.verdict.value == "wrong", record.feedback
    assert where in record.feedback, record.feedback


# -- complex outputs --------------------------------------------------------------------------------------

IN_FLOAT64 = variant(RFFT, "torch.fft.rfft(torch.cat(blocks), dim=1)",
                     "torch.fft.rfft(torch.cat(blocks).double(), dim=1).to(torch.complex64)")
CONJUGATED = variant(RFFT, "torch.fft.rfft(torch.cat(blocks), dim=1)",
                     "torch.conj_physical(torch.fft.rfft(torch.cat(blocks), dim=1))")
MAGNITUDE = variant(RFFT, "torch.fft.rfft(torch.cat(blocks), dim=1)", "torch.fft.rfft(torch.cat(blocks), dim=1).abs()")


def test_complex_outputs_are_compared_on_both_parts(judge):
    assert_correct(judge, RFFT, IN_FLOAT64)
    record = judge.judge(RFFT, CONJUGATED)
    assert record.verdict.value == "wrong" and "elements differ" in record.feedback, record.feedback
    record = judge.judge(RFFT, MAGNITUDE)
    assert record.verdict.value == "wrong" and "dtype float32, expected complex64" in record.feedback, record.feedback


# -- variable length under a bound, rows in any order keyed by ids, ties --------------------------------

REVERSED = variant(DISPATCH, "    return rows, got, top", "    return rows.flip(0), got.flip(0), top")
ROWS_ONLY_REVERSED = variant(DISPATCH, "    return rows, got, top", "    return rows.flip(0), got, top")
HIGHER_INDEX_TIES = variant(DISPATCH, "torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]",
                            "(scores.shape[1] - 1 - torch.sort(scores.flip(1), dim=1, descending=True, "
                            "stable=True).indices)[:, :k]")
DROPS_ONE = variant(DISPATCH, "    return rows, got, top", "    return rows[1:], got[1:], top")
OVER_BOUND = variant(DISPATCH, "    return rows, got, top",
                     "    pad = 2 * x.shape[0] * dist.get_world_size()\n"
                     "    return torch.cat([rows, rows.new_zeros(pad, rows.shape[1])]), got, top")


def test_rows_in_any_order_are_compared_by_their_ids(judge):
    assert_correct(judge, DISPATCH, REVERSED)


@pytest.mark.parametrize("source,verdict,where", [
    (ROWS_ONLY_REVERSED, "wrong", "rows put in the order of output[1] on both sides"),
    (HIGHER_INDEX_TIES, "wrong", "output[2]: "),
    (DROPS_ONE, "wrong", "expected"),
    (OVER_BOUND, "runtime_error", "beyond its declared bound"),
], ids=["rows-without-ids", "ties-by-higher-index", "drops-a-token", "over-the-bound"])
def test_wrong_dispatch_is_judged_wrong_where(judge, source, verdict, where):
    record = judge.judge(DISPATCH, source)
    assert record.verdict.value == verdict, record.feedback
    assert where in record.feedback, record.feedback


def test_the_prompt_states_the_new_output_kinds(judge):
    prompts = {task: judge.open(task).prompt for task in TASKS}
    assert "updated['param']: input param updated in place" in prompts[ADAM]
    assert "a Python float" in prompts[ADAM] and "always None" in prompts[ADAM]
    assert "on the ranks with world = 0 only" in prompts[ADAM]
    assert "returns the same bits" in prompts[ADAM]
    assert "complex64" in prompts[RFFT] and "on real and imaginary parts" in prompts[RFFT]
    assert "at most (W * T, D) = (32, 8)" in prompts[DISPATCH]
    assert "ties: the lower index first" in prompts[DISPATCH]


# -- the declarations, in this process ---------------------------------------------------------------------

def _spec(**overrides) -> TaskSpec:
    fields = dict(name="toy", title="Toy", description="toy", family="tensor", pkb_id=None, origin="tests",
                  inputs=(Tensor("x", ("N",), layout=Replicated()),),
                  outputs=(Output("y", ("N",), layout=Replicated()),), golden=lambda inputs, world: [],
                  cost=lambda c: Cost(comm=(Comm("all_reduce", c.nbytes("x")),)), tolerance_rule=Sum("W"),
                  presets={"tiny": Preset({"N": 4}, "float32"), "bench": Preset({"N": 64}, "float32")},
                  dtypes=("float32",))
    fields.update(overrides)
    return TaskSpec(**fields)


@pytest.mark.parametrize("overrides,problem", [
    (dict(outputs=(Output("y", ("N",), dtype="complex"),), dtypes=("float32", "bfloat16")), "no complex bfloat16"),
    (dict(outputs=(Output("y", ("N",)), Output("z", ("N",), order_by="y"))), "must name another returned integer"),
    (dict(outputs=(InPlace("w"),)), "InPlace('w') must name a tensor input"),
    (dict(outputs=(Output("y", ("N",), only_on=OnRanks(tp=0)),)), "only_on names mesh dimension(s) ['tp']"),
], ids=["complex-bf16", "order-by-float", "inplace-unknown", "on-ranks-unknown-dim"])
def test_declarations_that_cannot_hold_are_refused_with_the_fix(overrides, problem):
    with pytest.raises(TaskError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        _spec(**overrides)


@pytest.mark.parametrize("make,problem", [
    (lambda: Output("y"), "declare its shape, or for a variable-length output its bound max_shape"),
    (lambda: Output("y", ("N",), identical=True, layout=PerRank()), "identical=True needs a layout"),
    (lambda: Output("y", ("N",), compare="unordered"), "declare order_by"),
    (lambda: Output("s", ("N",), kind="scalar"), "a scalar output has no shape"),
], ids=["no-shape-no-bound", "identical-per-rank", "unordered-floats", "scalar-with-shape"])
def test_outputs_that_cannot_hold_are_refused_with_the_fix(make, problem):
    with pytest.raises(ValueError, match=problem):
        make()


def test_outputs_on_a_set_of_ranks_are_none_elsewhere_in_the_golden():
    spec = _spec(outputs=(Output("y", ("N",), layout=Replicated(), only_on=OnRanks(world="W - 1")),))
    world = spec.world({"N": 4}, 3, "float32")
    assert [v is None for v in world.distribute(torch.ones(4), "y")] == [True, True, False]


def test_the_bound_of_a_variable_length_output_is_checked_and_counted():
    spec = _spec(outputs=(Output("y", max_shape=("2 * N",)),))
    assert spec.bound_problems(torch.zeros(8), {"N": 4}, 2) == []
    assert "beyond its declared bound [8]" in spec.bound_problems(torch.zeros(9), {"N": 4}, 2)[0]
    assert spec.output_problem(2, Preset({"N": 2 ** 26}, "float32")) is not None  # 512 MiB at the bound


def test_fft_rule_grows_with_log2_n():
    rule = Fft("N", "sqrt(N)")
    small, large = (rule(torch.float32, {"N": n}, torch.complex64).atol for n in (64, 4096))
    assert large / small == pytest.approx(2 * 8)  # log2 doubles, sqrt(N) magnitude grows 8x


def test_rows_keyed_by_ids_compare_and_fingerprint_alike_in_any_order():
    rows, ids = torch.randn(6, 3), torch.tensor([4, 0, 5, 2, 1, 3])
    perm = torch.tensor([3, 1, 0, 5, 2, 4])
    checks = {"output[0]": Check(Tolerance(1e-6, 1e-6, "t"), order_by="output[1]"),
              "output[1]": Check(Tolerance(0, 0, "exact"), unordered=True)}
    assert compare_outputs((rows, ids), (rows[perm], ids[perm]), checks, "t", 0) == []
    wrong = compare_outputs((rows, ids), (rows[perm], ids), checks, "t", 0)
    assert wrong and "rows put in the order of output[1]" in wrong[0].message
    rules = {path: [c.tolerance.atol, c.tolerance.rtol, c.order] for path, c in checks.items()}

    def payload(value, reference):
        return {"outputs": fingerprint_calls([value], 7, rules, bound=reference),
                "inputs": fingerprint_calls([()], 8, None, root="argument"), "problems": [], "samples": {}}

    expected = payload((rows, ids), True)
    assert compare_burst(expected, payload((rows[perm], ids[perm]), False), checks, 0, 0) == []
    assert compare_burst(expected, payload((rows[perm], ids), False), checks, 0, 0)
