"""Where the executor puts ranks and what they run on (pkb_env/executors/placement.py), as made, before anything
starts."""
from __future__ import annotations

from conftest import FAST
from pkb_env.executors import make_executor
from pkb_env.wire.messages import HOST_STAGED


def test_only_candidates_get_the_group_the_reference_keeps_plain_gloo():
    """On CPU ranks a candidate's process group takes the forms NCCL takes (tests/ranks/test_gloo_forms.py); the
    trusted reference keeps plain gloo."""
    executor = make_executor(FAST.replace(executor="cpu", world_size=4))
    try:
        assert (executor.placement.backend, executor.reference_placement.backend) == (HOST_STAGED, "gloo")
    finally:
        executor.close()
