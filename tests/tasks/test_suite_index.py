"""The suite's index (pkb_env/suite_index_data.py), which the command line reads to refuse bad input before torch is
imported, is the specs' own answer: names, presets, dtypes and world sizes."""
import pytest

from pkb_env import suite_index
from pkb_env.catalog import INDEX, index_source
from pkb_env.task import TaskError, load_task, size_problem, task_names


def test_the_index_is_generated_from_the_specs_and_not_stale():
    assert INDEX.read_text() == index_source(), "pkb_env/suite_index_data.py is stale: run python -m pkb_env.catalog --write"
    assert suite_index.names() == task_names()


@pytest.mark.parametrize("task, preset, dtype, world_size", [
    ("ulysses_attention", "tiny", None, 3), ("ulysses_attention", "tiny", None, 4), ("all_reduce", "huge", None, 2),
    ("all_reduce", "tiny", "int8", 2), ("conv2d_halo_exchange", "bench", None, 3), ("allgather_gemm", "tiny", None, 5)])
def test_the_index_refuses_what_the_spec_refuses(task, preset, dtype, world_size):
    by_spec = size_problem(load_task(task), world_size, preset, dtype)
    by_index = suite_index.problem(task, preset, dtype, world_size)
    assert (by_index is None) == (by_spec is None), (by_index, by_spec)


def test_an_unknown_task_gets_the_closest_names_not_all_87():
    with pytest.raises(TaskError) as caught:
        load_task("all_reduc")
    message = str(caught.value)
    assert message.startswith("unknown task 'all_reduc'; did you mean 'all_reduce'?")
    assert "`pkb-env tasks`" in message and "all_gather" not in message and len(message) < 250
    assert "no task is named like it" in suite_index.unknown_task("zzzz")
