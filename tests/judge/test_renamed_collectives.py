"""torch 2.13's names for the tensor collectives (issue 47, row 12): the all_gather reference calls the current one
(all_gather_into_tensor warns there), and the screen knows the new names as collectives, so a task that forbids
collectives refuses them as it refuses the old ones."""
import warnings

import pytest
import torch
import torch.distributed as dist

from pkb_env.judge.screen import screen_source
from pkb_env.task import load_reference


@pytest.mark.parametrize("call", ["dist.all_gather_single(o, t)", "dist.reduce_scatter_single(o, t)"])
def test_the_new_names_are_collectives(call):
    code = f"import torch.distributed as dist\n\ndef solution(tensor):\n    o = t = tensor\n    {call}\n    return o\n"
    assert {f.code for f in screen_source(code, ["tensor"]).flags} == {"uses_collectives"}
    assert {f.code for f in screen_source(code, ["tensor"], collectives_allowed=False).flags} == {"forbidden_collective"}


def test_the_all_gather_reference_calls_no_deprecated_api():
    store = dist.HashStore()
    dist.init_process_group("gloo", rank=0, world_size=1, store=store)
    try:
        tensor = torch.randn(4, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # a FutureWarning (a deprecated name) fails the call
            out = load_reference("all_gather")(tensor)
    finally:
        dist.destroy_process_group()
    assert torch.equal(out, tensor[None])
