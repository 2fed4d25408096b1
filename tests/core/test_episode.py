"""The episode's rules (pkb_env/episode.py, docs/architecture.md "The episode"), on records made by hand."""
from __future__ import annotations


def test_a_speedup_whose_interval_straddles_the_target_does_not_end_the_episode():
    from pkb_env.episode import reached
    from pkb_env.record import EvaluationRecord, TimingResult, Verdict

    def record(speedup, low, high):
        timing = TimingResult(time_s=1e-3, statistic="interval-min", clock="host", median_s=1e-3, spread=0.1,
                              min_s=1e-3, max_s=1e-3, calls=10, warmup_calls=1, speedup=speedup,
                              speedup_low=low, speedup_high=high)
        return EvaluationRecord("all_reduce", 2, "tiny", "float32", "cpu", "cpu/x", verdict=Verdict.CORRECT,
                                timing=timing)

    assert not reached(record(1.04, 0.93, 1.12), 1.0) and not record(1.04, 0.93, 1.12).distinguishable_from(1.0)
    assert reached(record(1.3, 1.1, 1.5), 1.0) and record(1.3, 1.1, 1.5).distinguishable_from(1.0)
    assert reached(record(1.3, None, None), 1.0) and not reached(record(0.9, None, None), 1.0)
