"""A newcomer's door (examples/async_door.py, one page against pkb_env/client.py and pkb_env/episode.py): two
episodes played concurrently from asyncio on one local judge, each turn judged as the Gymnasium env judges it."""
import importlib.util
from pathlib import Path

from pkb_env.task import load_task

DOOR = Path(__file__).resolve().parents[2] / "examples" / "async_door.py"


def test_an_async_door_plays_concurrent_episodes_over_one_client(tmp_path):
    spec = importlib.util.spec_from_file_location("async_door", DOOR)
    door = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(door)
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    (attempts / "1_prose.py").write_text("I would use a ring all-reduce.\n")
    (attempts / "2_reference.py").write_text(load_task("all_reduce").reference_source)
    results = door.main(["all_reduce", str(attempts), "--episodes", "2", "--max-turns", "2", "--world-size", "2",
                         "--executor", "cpu"])
    assert [r["verdicts"] for r in results] == [["unparsable", "correct"]] * 2, results
    assert all(r["turns"] == 2 and r["judge_errors"] == 0 for r in results), results
    assert len(DOOR.read_text().splitlines()) < 100
