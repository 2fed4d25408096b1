"""Suite evaluation: pass@k and fast_p on hand-made rows, then `pkb-env evaluate` end to end on the CPU executor."""
import dataclasses
import json
import math

import pytest
import yaml

from conftest import FAST
from pkb_env import solutions
from pkb_env.entrypoints.cli import main
from pkb_env.evaluation import EvaluationReport, SampleResult, agent_from_spec, evaluate, fast_p, pass_at_k

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def row(task, correct, speedup=None, roofline=None, sample=0, verdict=None, speedup_low=None):
    return SampleResult(task=task, sample=sample, verdict=verdict or ("correct" if correct else "wrong"),
                        correct=correct, speedup=speedup, roofline_fraction=roofline, speedup_low=speedup_low)


def test_fast_p_needs_the_lower_end_of_the_interval_above_p():
    """A speedup of 1.05x whose paired bursts straddle 1 is not shown faster than the reference."""
    straddles = [row("a", True, speedup=1.05, speedup_low=0.9)]
    shown = [row("a", True, speedup=1.05, speedup_low=1.01)]
    assert fast_p(straddles, 1.0) == 0.0 and fast_p(shown, 1.0) == 1.0
    assert fast_p(straddles, 0) == 1.0                         # fast_0 is correctness alone
    assert fast_p([row("a", True, speedup=1.05)], 1.0) == 1.0  # no interval (fewer than 5 pairs): the speedup


# -- pass@k ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, c, k, expected", [
    (1, 1, 1, 1.0),
    (1, 0, 1, 0.0),
    (2, 1, 1, 0.5),
    (10, 3, 1, 0.3),                      # pass@1 = c / n
    (5, 1, 2, 0.4),                       # 1 - C(4,2)/C(5,2) = 1 - 6/10
    (10, 2, 5, 1 - math.comb(8, 5) / math.comb(10, 5)),  # 1 - 56/252 = 7/9
    (4, 2, 3, 1.0),                       # n - c < k: any 3 of 4 hold a correct one
])
def test_pass_at_k_known_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_edges():
    assert pass_at_k(10, 2, 5) == pytest.approx(7 / 9)
    for n in (1, 3, 7):
        assert pass_at_k(n, 0, 1) == 0.0 and pass_at_k(n, 0, n) == 0.0        # c = 0
        assert pass_at_k(n, n, 1) == 1.0 and pass_at_k(n, n, n) == 1.0        # c = n
        assert pass_at_k(n, 1, n) == 1.0                                      # n = k: one correct is enough
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)


# -- fast_p and the report's metrics --------------------------------------------------------------------
ROWS = [
    row("a", True, 2.5, 0.8), row("a", False, sample=1),           # a: correct, 2.5x
    row("b", True, 1.2, 0.4), row("b", True, 0.9, 0.3, sample=1),  # b: correct, best 1.2x
    row("c", True, None, None),                                     # c: correct, not timed
    row("d", False), row("d", False, sample=1, verdict="runtime_error"),  # d: never correct
]


def test_fast_p_on_hand_made_rows():
    assert fast_p(ROWS, 0) == 0.75       # a, b, c correct (timed or not), d not
    assert fast_p(ROWS, 1) == 0.5        # a (2.5) and b (1.2)
    assert fast_p(ROWS, 1.2) == 0.25     # strictly greater: b's 1.2 does not count
    assert fast_p(ROWS, 2) == 0.25
    assert fast_p(ROWS, 3) == 0.0
    # a fast but wrong sample never counts
    assert fast_p([row("x", False, 5.0, 0.9)], 1) == 0.0
    assert fast_p([], 1) is None
    with pytest.raises(ValueError):
        fast_p(ROWS, -1)


def test_report_metrics_and_outputs(tmp_path):
    report = EvaluationReport(rows=ROWS, ks=(1, 2), ps=(0, 1, 1.5, 2), agent="hand", executor="cpu", world_size=4)
    suite = report.suite_metrics()
    by_task = {s.task: s for s in report.task_summaries()}
    assert by_task["a"].n == 2 and by_task["a"].correct == 1 and by_task["a"].pass_at_k == {1: 0.5, 2: 1.0}
    assert by_task["b"].best_speedup == 1.2 and by_task["b"].best_roofline_fraction == 0.4
    assert by_task["c"].pass_at_k == {1: 1.0}                 # k=2 > n=1: left out
    assert by_task["d"].verdicts == {"wrong": 1, "runtime_error": 1} and by_task["d"].best_speedup is None
    assert suite["pass@1"] == pytest.approx((0.5 + 1.0 + 1.0 + 0.0) / 4)
    assert suite["pass@2"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert (suite["fast_0"], suite["fast_1"], suite["fast_1.5"], suite["fast_2"]) == (0.75, 0.5, 0.25, 0.25)
    assert suite["mean_roofline_fraction"] == pytest.approx((0.8 + 0.4 + 0.3) / 3)

    data = json.loads(report.to_json())
    assert data["suite"]["fast_1"] == 0.5 and data["tasks"]["a"]["pass_at_k"] == {"pass@1": 0.5, "pass@2": 1.0}
    md = report.to_markdown()
    assert "## Suite metrics" in md and "## Per task" in md and "| a | 2 | 1 |" in md

    # an executor that does not time: fast_p for p > 0 is unknown, not 0
    blind = EvaluationReport(rows=ROWS, executor="cuda-emulated", performance_available=False)
    assert blind.suite_metrics()["fast_0"] == 0.75 and blind.suite_metrics()["fast_1"] is None

    # no correct sample: the plot still comes out, with a note
    empty = EvaluationReport(rows=[row("d", False)])
    path = empty.plot(tmp_path / "empty.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


# -- end to end -----------------------------------------------------------------------------------------
def test_cli_evaluate_reference(tmp_path, capsys):
    out = tmp_path / "tmp"
    settings = tmp_path / "judge.yaml"   # the tests' short timing protocol (conftest.FAST's), a judge setting
    settings.write_text(yaml.safe_dump({"protocol": dataclasses.asdict(FAST.protocol)}))
    argv = ["evaluate", "--tasks", "all_reduce,broadcast", "--agent", "reference", "--world-size", "2",
            "--executor", "cpu", "--out", str(out), "--config", str(settings)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for name in ("report.json", "report.md", "speedup_vs_roofline.png"):
        assert (out / name).is_file(), name

    data = json.loads((out / "report.json").read_text())
    assert set(data["tasks"]) == {"all_reduce", "broadcast"}
    for name in ("all_reduce", "broadcast"):
        assert data["tasks"][name]["correct"] == 1 and data["tasks"][name]["pass_at_k"]["pass@1"] == 1.0
    assert all(r["verdict"] == "correct" and r["correct"] for r in data["rows"])
    assert data["suite"]["pass@1"] == 1.0 and data["suite"]["fast_0"] == 1.0
    assert data["meta"]["executor"] == "cpu" and data["meta"]["world_size"] == 2

    md = (out / "report.md").read_text()
    assert "## Suite metrics" in md and "## Per task" in md
    assert "| metric | value |" in md and "| task | n | correct | pass@1 |" in md
    assert "| all_reduce | 1 | 1 |" in md and "| broadcast | 1 | 1 |" in md
    assert "## Suite metrics" in printed and "| all_reduce |" in printed

    png = (out / "speedup_vs_roofline.png").read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 5_000


def test_files_agent_with_a_wrong_candidate(tmp_path):
    folder = tmp_path / "answers"
    folder.mkdir()
    ring = solutions.read("examples", "all_reduce_ring")
    (folder / "all_reduce.py").write_text(ring)
    (folder / "broadcast.py").write_text("def solution(tensor, src=0):\n    return tensor.clone()  # no broadcast\n")
    agent = agent_from_spec(f"files:{folder}")
    report = evaluate(agent, tasks=["all_reduce", "broadcast"], samples=2, ks=(1, 2), progress=False,
                      config=FAST.replace(executor="cpu", world_size=2, trials=1))
    by_task = {s.task: s for s in report.task_summaries()}
    assert by_task["all_reduce"].correct == 2 and by_task["all_reduce"].pass_at_k == {1: 1.0, 2: 1.0}
    assert by_task["broadcast"].correct == 0 and by_task["broadcast"].pass_at_k == {1: 0.0, 2: 0.0}
    assert [r.verdict for r in report.rows if r.task == "broadcast"] == ["wrong", "wrong"]
    assert [r.sample for r in report.rows] == [0, 1, 0, 1]
    suite = report.suite_metrics()
    assert suite["pass@1"] == 0.5 and suite["fast_0"] == 0.5 and suite["samples"] == 4
    assert report.agent == f"files:{folder}"


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "--agent", "magic"], "unknown agent 'magic'"),
    (["evaluate", "--tasks", "nope", "--executor", "cpu"], "unknown task 'nope'"),
    (["evaluate", "--agent", "files:/no/such/folder"], "no such folder"),
    (["evaluate", "--k", "1,x"], "--k"),
    (["evaluate", "--k", "3", "--executor", "cpu", "--tasks", "all_reduce"], "pass@3 needs at least 3 samples"),
])
def test_evaluate_errors_are_clear(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_files_agent_missing_task_file(tmp_path, capsys):
    (tmp_path / "all_reduce.py").write_text("def solution(tensor):\n    return tensor\n")
    assert main(["evaluate", "--agent", f"files:{tmp_path}", "--tasks", "all_reduce,gather", "--executor", "cpu",
                 "--out", str(tmp_path / "o")]) == 2
    assert "no file for task(s) gather" in capsys.readouterr().err
