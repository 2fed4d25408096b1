"""The prompt and the feedback say what is true, in one vocabulary (issue 47, row 7): no "below" for a section
above; one name for the timing figure in the rules, the feedback and the stage table; the rules say which code is
rejected and which only noted; a bound's collective says why it is the one at this size; the host's time per call
says what it is; an edge case the statement promises is shown where the sizes are."""
from __future__ import annotations

import pytest

from pkb_env.config import STATISTIC_WORDS, JudgeConfig
from pkb_env.executors import imagined_executor
from pkb_env.judge.feedback import write_feedback
from pkb_env.prompt import Hardware
from pkb_env.record import EvaluationRecord, TimingResult, Verdict
from pkb_env.service import TaskSession
from pkb_env.task import load_task
from pkb_env.topology import load_topology


def prompt(task: str, world_size: int = 4, board: str = "cpu", preset: str = "tiny") -> str:
    """The first prompt of `task` as a JudgeService of that board builds it (nothing started)."""
    config = JudgeConfig(executor="auto", world_size=world_size)
    topology = load_topology(board)
    plan = imagined_executor(config, board, topology.devices_per_node)
    hardware = Hardware(plan.info.name, world_size, load_topology(plan.info.topology), plan.placement.gpu,
                        config.protocol_for(plan.placement.clock).statistic)
    return TaskSession.preview(hardware, load_task(task), preset).prompt


def timed_record(clock: str, statistic: str, time_s: float, launch_s: float) -> EvaluationRecord:
    timing = TimingResult(time_s=time_s, statistic=statistic, clock=clock, median_s=time_s, spread=0.1, min_s=time_s,
                          max_s=time_s, calls=40, warmup_calls=4, bursts=5, reference_s=time_s, speedup=1.0,
                          launch_s=launch_s)
    return EvaluationRecord("all_reduce", 2, "tiny", "float32", "cpu", "cpu/x", verdict=Verdict.CORRECT,
                            timing=timing)


def test_no_section_above_is_called_below():
    text = prompt("gemm_reducescatter")
    assert " below" not in text.split("## Reference implementation")[0] + text.split("```\n\n## Hardware")[1]
    assert "compared at the tolerance stated under Outputs" in text
    assert text.index("## Outputs") < text.index("## Cost model") < text.index("cost model's bound, above,")


@pytest.mark.parametrize("board, clock, statistic", [("cpu", "host", "interval-min"),
                                                     ("h200_8gpu", "cuda", "burst-median")])
def test_the_timing_figure_has_one_name_in_the_rules_the_feedback_and_the_stage_table(board, clock, statistic):
    from pkb_env.entrypoints.cli.commands import stage_table

    words = STATISTIC_WORDS[statistic]
    rules = prompt("all_reduce", 2, board).split("## Rules")[1]
    assert f"your time per call is {words}" in " ".join(rules.split())
    assert "minimum on CPU ranks" not in rules and "median over calls" not in rules
    record = timed_record(clock, statistic, 1.001e-3, 0.5e-3)
    record.stage_seconds["time"] = 30.34
    feedback = write_feedback(record)
    assert f"Time per call: 1.001 ms ({words}; 5 bursts" in feedback
    table = stage_table(record)
    assert "time per call 1.001 ms" in table and statistic not in table and statistic not in feedback
    assert "3.034e+04" not in table and "30340  time per call" in table


def test_the_host_time_per_call_says_what_it_is():
    cpu = write_feedback(timed_record("host", "interval-min", 1.001e-3, 3.103e-3))
    assert ("the host's time per call over whole bursts 3.103 ms, scheduling stalls included, which the fastest "
            "interval leaves out") in cpu
    gpu = write_feedback(timed_record("cuda", "burst-median", 1.001e-3, 3.103e-3))
    assert ("host time to issue a call 3.103 ms, what a CUDA graph would save: above the time per call, so the host "
            "limits your speed") in gpu


def test_the_rules_say_what_is_rejected_and_what_is_only_noted():
    rules = " ".join(prompt("all_reduce").split("## Rules")[1].split())
    rejected = rules.split("- Rejected with the lowest reward")[1].split("- Allowed")[0]
    noted = rules.split("- Allowed, and noted in the feedback:")[1].split("- Limits")[0]
    assert "reading the judge's files" not in rejected and "environment" not in rejected
    assert "patching torch" in rejected and "multicast" in rejected and "loading code from files" in rejected
    assert "opening files and reading the environment" in noted


def test_the_bound_says_why_its_collective_differs_by_size():
    at4, at8 = (prompt("ulysses_attention", w).split("## Cost model")[1].splitlines()[1] for w in (4, 8))
    assert at4.startswith("- all_gather") and at8.startswith("- all_to_all")
    assert "the head split moves fewer bytes from 5 ranks on, where they divide the heads" in at4
    assert "Ulysses' head split (all_to_all: 4 tensors" in at8 and "rather than a ring of whole blocks" in at8


def test_an_edge_case_the_statement_promises_is_shown():
    text = prompt("distributed_sample_sort")
    assert "may be 0 on some ranks" not in text
    assert "in some calls every odd rank holds none (n = 0: an edge case below)" in text
    assert ("Edge cases of the statement, drawn beside the values above (the trials of every step include each, and "
            "one timed call in two is one of them): n = 0 on the odd ranks (no values there)") in text
