"""What the judge asks its ranks (pkb_env/wire/requests.py): a request is as strict where a rank reads it as
where the judge makes it."""
from __future__ import annotations

import json

import pytest

from pkb_env.wire import requests


def test_requests_are_as_strict_on_the_rank_side_as_when_made():
    workload = requests.TaskWorkload("all_reduce", "tiny", "float32", "cpu")
    burst = requests.Burst(workload, {"world=0": 7}, calls=8, epoch=1, marks_every=2)
    message = json.loads(json.dumps({**burst.message(), "nonce": "n" * 32}))
    assert requests.parse(message) == (burst, "n" * 32)
    for change, problem in [({"calls": "8"}, "Burst.calls"), ({"extra": 1}, "keys"), ({"label": "x"}, "labelled"),
                            ({"op": "launch_missiles"}, "no known kind"), ({"seeds": {"world=0": -1}}, "seeds"),
                            ({"workload": {"kind": "task", "task": "all_reduce"}}, "TaskWorkload")]:
        with pytest.raises(requests.RequestError, match=problem):
            requests.parse({**message, **change})
    with pytest.raises(requests.RequestError, match="rng"):
        requests.TaskWorkload("all_reduce", "tiny", "float32", "gpu")
    with pytest.raises(requests.RequestError, match="seeds"):
        requests.Trials(workload, ())
