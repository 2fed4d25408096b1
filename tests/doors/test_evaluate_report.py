"""An evaluation's report says how sure its speedups are (issue 47, row 9): report.md gives each speedup's 90%
interval, its fast_p rows say what fast_p counts (the interval's lower end), the fast_p reward counts the same way,
and the plot's axes fit the data, each speedup with its interval as a bar."""
from pkb_env.evaluation.plot import figure
from pkb_env.evaluation.report import EvaluationReport, SampleResult
from pkb_env.record import EvaluationRecord, TimingResult, Verdict
from pkb_env.rewards import load_reward

ROWS = [SampleResult("all_reduce", 0, "correct", True, 1.07, 0.048, 0.3, 0.93, speedup_high=1.21),
        SampleResult("all_reduce", 1, "correct", True, 0.81, 0.036, 0.1, 0.62, speedup_high=1.02),
        SampleResult("all_gather", 0, "correct", True, 1.4, 0.071, 0.5, 1.2, speedup_high=1.6),
        SampleResult("broadcast", 0, "correct", True, 0.95, 0.022, 0.2),
        SampleResult("broadcast", 1, "wrong", False)]
REPORT = EvaluationReport(ROWS, ks=(1, 2), agent="replayed", executor="cpu", world_size=2)


def test_report_md_gives_every_speedup_its_interval():
    text = REPORT.to_markdown()
    assert "| all_reduce | 2 | 2 | 1.000 | 1.000 | 1.07x [0.93, 1.21] | 4.8% |" in text
    assert "| all_reduce | 1 | correct | 0.81x [0.62, 1.02] | 3.6% | 0.100 |" in text   # the timed samples' table
    assert "| broadcast | 0 | correct | 0.95x | 2.2% |" in text   # too few pairs: no interval, said so above
    assert REPORT.to_dict()["rows"][0]["speedup_high"] == 1.21


def test_fast_p_rows_say_what_they_count_and_count_it():
    text = REPORT.to_markdown()
    assert "speedup > 1" not in text
    assert "| fast_1 (tasks with a correct sample whose speedup's 90% interval lies above 1x) | 0.333 |" in text
    assert "counts a correct sample only when the lower end of its speedup's 90% interval" in text


def test_the_fast_p_reward_counts_as_the_metric_does():
    def record(speedup, low, high):
        timing = TimingResult(time_s=1e-3, statistic="interval-min", clock="host", median_s=1e-3, spread=0.1,
                              min_s=1e-3, max_s=1e-3, calls=10, warmup_calls=1, speedup=speedup, speedup_low=low,
                              speedup_high=high)
        return EvaluationRecord("all_reduce", 2, "tiny", "float32", "cpu", "cpu/x", verdict=Verdict.CORRECT,
                                timing=timing)

    fast_1 = load_reward("fast_1")
    straddles = fast_1(record(1.07, 0.93, 1.21))
    assert straddles.value == 0.0 and "not shown above p=1: its 90% interval starts at 0.93" in straddles.terms["reason"]
    assert fast_1(record(1.4, 1.2, 1.6)).value == 1.0 and fast_1(record(1.4, None, None)).value == 1.0


def test_the_plot_fits_its_axes_and_bars_each_speedup_with_its_interval():
    ax = figure(REPORT).axes[0]
    low, high = ax.get_ylim()
    assert low == 0 and 0.071 < high < 0.1   # every fraction is under 0.1: not a 0-1 axis
    left, right = ax.get_xlim()
    assert left < 0.62 and right > 1.6 and right < 3
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert sum(len(c.lines[2][0].get_segments()) for c in bars) == 3   # the three samples with an interval
