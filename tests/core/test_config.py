"""JudgeConfig (pkb_env/config.py): one frozen, picklable object, read from plain data, naming every bad
setting with its fix."""
from __future__ import annotations

import dataclasses
import pickle
from dataclasses import replace

import pytest

from conftest import FAST
from pkb_env import JudgeConfig
from pkb_env.config import ConfigError, TimingProtocol


def test_the_config_is_one_picklable_object_that_names_bad_settings():
    config = JudgeConfig(executor="cpu", world_size=2, trials=5, protocol=FAST.protocol)
    assert pickle.loads(pickle.dumps(config)) == config
    assert JudgeConfig.from_mapping({"world-size": 2, "executor": "cpu", "trials": 5,
                                     "protocol": FAST.protocol}) == config
    # A mapping changes the defaults of the clock the judge's placement has, known only where it runs
    changed = JudgeConfig.from_mapping({"executor": "auto", "protocol": {"budget_s": 0.5, "min_bursts": 7}})
    assert changed.protocol is None and pickle.loads(pickle.dumps(changed)) == changed
    for clock in ("cuda", "host"):
        assert changed.protocol_for(clock) == replace(TimingProtocol.for_clock(clock), budget_s=0.5, min_bursts=7)
    assert changed.protocol_for("cuda").burst_s == 0.002 and changed.protocol_for("host").statistic == "interval-min"
    assert config.protocol_for("cuda") == FAST.protocol
    whole = JudgeConfig.from_mapping({"protocol": dataclasses.asdict(FAST.protocol)})   # every field: the protocol
    assert whole.protocol == FAST.protocol and whole.protocol_changes == ()
    for values, message in [({"world_sizes": 2}, "did you mean 'world_size'"),
                            ({"executor": "tpu"}, "unknown executor 'tpu'"),
                            ({"world_size": 0}, "world_size must be a positive integer"),
                            ({"step_budget_s": -1}, "step_budget_s must be a positive number"),
                            ({"calibration": "sometimes"}, "calibration 'sometimes' is unknown"),
                            ({"pin_ranks": "yes"}, "pin_ranks must be true or false"),
                            ({"protocol": {"burst": 1}}, "protocol: unknown setting")]:
        with pytest.raises(ConfigError, match=message):
            JudgeConfig.from_mapping(values)
    with pytest.raises(ConfigError, match="did you mean 'trials'"):
        config.replace(trial=3)
