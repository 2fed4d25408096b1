"""A misspelt setting gets the closest name (issue 47, row 12; docs/integrations.md promises it): JudgeConfig's
keywords (`JudgeConfig(wrld_size=4)` was a bare TypeError) and the keys of a --config file."""
import pytest

from pkb_env.config import ConfigError, JudgeConfig
from pkb_env.entrypoints.cli import main


def test_a_misspelt_keyword_names_the_setting():
    with pytest.raises(TypeError, match=r"unknown judge setting 'wrld_size'; did you mean 'world_size'\?") as caught:
        JudgeConfig(wrld_size=4)
    assert isinstance(caught.value, ConfigError)   # a bad setting like any other, and still a TypeError
    assert JudgeConfig(world_size=2).replace(trials=3).trials == 3


@pytest.mark.parametrize("key, close", [("wrld_size", "world_size"), ("trails", "trials"), ("rewrd", "reward")])
def test_a_config_file_typo_names_the_option(tmp_path, capsys, key, close):
    (tmp_path / "c.yaml").write_text(f"{key}: 2\n")
    assert main(["eval", "all_reduce", str(tmp_path / "c.yaml"), "--config", str(tmp_path / "c.yaml")]) == 2
    assert f"unknown option {key!r}; did you mean {close!r}?" in capsys.readouterr().err
