"""Every rule a task's statement states is reached in the trials of every step (issue 42, item 2).

Each task declares its rules as clauses (pkb_env/contract/clauses.py): a predicate over one trial's inputs on
every rank that says whether the trial exercises the rule. Here the trials of several steps of every task are
drawn as the judge draws them (judge/coverage.py: the judge's own trial plan and the task's own input maker;
nothing is judged, no rank starts) at every world size the tiny preset takes from 1 to 8 except 5-7, and every
applicable clause must be reached in every step. Before this, a step's trials held at most two of a task's
edge cases and no rule that only a 16-bit dtype exercises: 6 of 92 plausible bugs were accepted, or caught
only now and then (docs/rule_coverage.md has the table, benchmarks/rule_coverage.py the script).
"""
from __future__ import annotations

import pytest
import torch

from pkb_env.config import JudgeConfig
from pkb_env.contract import rank_seeds
from pkb_env.contract.edges import edge_of
from pkb_env.contract.mesh import SHARED
from pkb_env.judge.context import StepContext
from pkb_env.judge.coverage import applicable, reached, step_trials
from pkb_env.task import load_task, task_names
from pkb_env.wire.requests import TaskWorkload, Trials, parse

TASKS = task_names()
WORLD_SIZES = (1, 2, 3, 4, 8)
SECRETS = range(3)
TRIALS = JudgeConfig().trials


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny draws: torch's thread pool costs more than it saves (10x on the 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("task", TASKS)
def test_every_declared_rule_is_reached_in_every_step(task):
    spec = load_task(task)
    dtype = spec.presets["tiny"].dtype
    for world_size in spec.allowed_world_sizes("tiny", WORLD_SIZES):
        clauses = applicable(spec, "tiny", world_size)
        for secret in SECRETS:
            counts = reached(clauses, step_trials(spec, "tiny", dtype, world_size, secret, TRIALS))
            missed = [name for name, count in counts.items() if not count]
            assert not missed, (f"{task} at W = {world_size}, step secret {secret}: the trials never reach "
                                f"{missed} (declare an edge case that draws it, or sizes that make it happen)")


@pytest.mark.parametrize("task", TASKS)
def test_every_task_states_its_rules_and_every_edge_case_draws_one(task):
    """No hand list: a task without clauses, or an edge case no clause names, is a rule left unchecked."""
    spec = load_task(task)
    assert spec.clauses, f"{task}: declare the statement's rules as clauses (docs/task_contract.md)"
    drawn = {c.edge for c in spec.clauses}
    assert all(e.name in drawn for e in spec.edges), f"{task}: an edge case that no clause says it draws"


SIXTEEN_BIT = [t for t in TASKS if any(c.dtypes for c in load_task(t).clauses)]


@pytest.mark.parametrize("task", SIXTEEN_BIT)
def test_a_rule_of_16_bit_precision_adds_one_trial_to_a_float32_step_and_none_to_a_16_bit_one(task):
    spec = load_task(task)
    world = spec.allowed_world_sizes("tiny", (2, 4))[0]
    plain = StepContext.make(spec, "tiny", "float32", world, "cpu", TRIALS, 1.0)
    assert plain.trial_dtypes[-1] == "bfloat16" and plain.trial_dtypes.count("bfloat16") == 1
    assert plain.trial_labels[-1].endswith("(in bfloat16)")
    assert plain.trial_checks(plain.trials - 1) is plain.other_checks["bfloat16"]
    assert plain.other_checks["bfloat16"] == spec.output_checks("bfloat16", spec.presets["tiny"].dims, world)
    sixteen = StepContext.make(spec, "tiny", "bfloat16", world, "cpu", TRIALS, 1.0)
    assert set(sixteen.trial_dtypes) == {"bfloat16"} and sixteen.other_dtypes == ()
    dtyped = [c for c in applicable(spec, "tiny", world) if c.dtypes]
    counts = reached(dtyped, step_trials(spec, "tiny", "bfloat16", world, 0, TRIALS))
    assert all(counts.values()), counts


def test_a_step_holds_every_edge_case_and_one_plain_trial_whatever_the_configured_count():
    """quantized_grad_allreduce has two edge cases: a step of two configured trials has three (it had two,
    and a step held one of the cases, at random)."""
    spec = load_task("quantized_grad_allreduce")
    for configured in (1, 2, 3, 5):
        ctx = StepContext.make(spec, "tiny", "float32", 2, "cpu", configured, 1.0)
        assert ctx.trials == max(configured, len(spec.edges) + 1)
        seeds = ctx.trial_seeds()
        cases = [edge_of(seeds[0][k][SHARED], spec.edges) for k in range(ctx.trials)]
        assert {e.name for e in cases if e is not None} == {e.name for e in spec.edges}
        assert None in cases


def test_the_16_bit_trial_is_plain_and_comes_last():
    spec = load_task("importance_sampling_loss")
    for secret in range(20):
        trials = step_trials(spec, "tiny", "float32", 2, secret, TRIALS)
        assert [t.dtype for t in trials] == ["float32"] * (len(trials) - 1) + ["bfloat16"]
        assert not any(bool((labels == -100).all()) for labels in trials[-1].each("labels"))


def test_a_trials_request_carries_one_dtype_per_call_and_refuses_a_mismatch():
    workload = TaskWorkload("importance_sampling_loss", "tiny", "float32", "cpu")
    request = Trials(workload, ({"shared": 1}, {"shared": 2}), ("float32", "bfloat16"))
    again, _ = parse({**request.message(), "nonce": ""})
    assert again == request and again.workload_of(1).dtype == "bfloat16" and again.workload_of(0) == workload
    with pytest.raises(ValueError, match="one dtype name per seed"):
        Trials(workload, ({"shared": 1},), ("float32", "bfloat16"))


@pytest.mark.parametrize("case", ["empty_expert", "idle_rank"])
def test_a_routing_edge_case_is_the_same_routing_for_the_ranks_and_for_the_judges_cost_model(case):
    """The judge redraws timed calls' routings for the roofline (judge/context.py): on an edge-case call it
    must see the counts the ranks saw."""
    spec = load_task("moe_ep_wide")
    world, dims = 4, spec.presets["tiny"].dims
    layout = spec.layout(world, dims)
    edge = next(e for e in spec.edges if e.name == case)
    index = next(i for i in range(500) if edge_of(rank_seeds(7, layout, 0, "call", i)[SHARED], spec.edges) is edge)
    seeds = [rank_seeds(7, layout, r, "call", index) for r in range(world)]
    picks = [spec.make_inputs(spec.input_context(r, world, "tiny", "float32", "cpu", seeds[r]))[1]
             for r in range(world)]
    per_expert = torch.cat(picks).flatten().bincount(minlength=2 * world)     # E = 2W, two experts a rank
    received = per_expert.view(world, 2).sum(dim=1)                         # pairs each rank's experts receive
    assert bool((per_expert == 0).any()) and (case == "empty_expert" or bool((received == 0).any()))
    assert spec.cost_context(dims, world, "float32", [seeds]).routing("route").received_pairs == received.max()
