"""`pkb-env topology` says what `auto` resolves to here and which calibration a prompt would carry (issue 47,
row 12): it printed "Executor: auto" and nothing of the cache."""
from pkb_env.entrypoints.cli import main


def test_topology_names_the_resolved_executor_and_the_missing_calibration(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PKB_ENV_CACHE", str(tmp_path))   # nothing cached here
    assert main(["topology", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "Executor: cpu (--executor auto, resolved here), world size 2." in out
    assert "Executor: auto" not in out and "Measured here" not in out
    assert "calibration: none cached for cpu/" in out and "pkb-env calibrate --world-size 2 --executor cpu" in out
