"""Where the executor puts ranks and what they run on (pkb_env/executors/placement.py), as made, before anything
starts."""
from __future__ import annotations

from conftest import FAST
from pkb_env.executors import make_executor
from pkb_env.wire.messages import HOST_STAGED


def test_candidates_and_the_reference_get_the_same_group_on_cpu_ranks():
    """On CPU ranks every process group takes the forms NCCL takes and keeps its rules (tests/ranks/test_gloo_forms.py,
    test_host_staged.py): the trusted reference's too, so that a reference NCCL would refuse fails here first."""
    executor = make_executor(FAST.replace(executor="cpu", world_size=4))
    try:
        assert (executor.placement.backend, executor.reference_placement.backend) == (HOST_STAGED, HOST_STAGED)
    finally:
        executor.close()
