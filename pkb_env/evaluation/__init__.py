"""Evaluating an agent over the suite: the run (runner.py), its rows and report (report.py), the metrics
(metrics.py), the plot (plot.py)."""
from pkb_env.evaluation.metrics import fast_p, pass_at_k
from pkb_env.evaluation.report import EvaluationReport, SampleResult, TaskSummary
from pkb_env.agents.specs import agent_from_spec
from pkb_env.evaluation.runner import evaluate, resolve_tasks

__all__ = ["SampleResult", "TaskSummary", "EvaluationReport", "evaluate", "pass_at_k", "fast_p", "agent_from_spec",
           "resolve_tasks"]
