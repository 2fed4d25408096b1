"""The inputs of a burst (pkb_env/ranks/bursts.py): every burst refills the same buffers with new values."""
from __future__ import annotations


def test_every_burst_refills_the_same_input_buffers_with_new_content():
    """Call i of every burst reads the same addresses with fresh values (so an address-keyed cache hits for
    certain and answers stale); arguments that are not plain buffers of the same kind are made fresh."""
    import torch

    from pkb_env.ranks.bursts import Workload, make_sets

    def make(seeds):
        g = torch.Generator().manual_seed(seeds["world=0"] % (1 << 62))
        base = torch.randn(8, generator=g)
        return torch.randn(4, 4, generator=g), base[:4], seeds["world=0"] % 7

    workload = Workload(call=lambda *args: None, make=make)
    first = make_sets(workload, {"world=0": 11}, 3)
    pointers = [args[0].data_ptr() for args in first]
    second = make_sets(workload, {"world=0": 12}, 4, into=first)
    expected = make_sets(workload, {"world=0": 12}, 4)
    assert [args[0].data_ptr() for args in second[:3]] == pointers          # the same buffers ...
    for got, want in zip(second, expected):                                 # ... holding the new burst's values
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[2] == want[2]
    assert second[0][1] is not first[0][1]   # a view is never refilled: its storage may hold more than it shows
