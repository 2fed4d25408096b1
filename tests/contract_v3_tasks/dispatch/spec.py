"""contract_v3_tasks.dispatch (an example spec outside the suite): variable-length outputs with a bound, float rows
in any order keyed by an id output, and integer indices with a stated tie rule (tests/contract/test_output_kinds.py;
docs/task_contract.md, "Outputs" and "Comparison and tolerance")."""

import torch

from pkb_env.contract import (Comm, Const, Cost, Integers, Output, Preset, Relative, TaskSpec, Tensor, Uniform)


def golden(inputs, world):
    """Per rank: every token routed to it, with its id, in source order; top-k by a stable descending sort."""
    tokens = inputs[0]["x"].shape[0]
    out = []
    for rank, args in enumerate(inputs):
        rows, ids = [], []
        for src, a in enumerate(inputs):
            mine = a["expert"] == rank
            rows.append((a["x"].double() * a["weight"].double()[:, None])[mine].to(a["x"].dtype))
            ids.append((torch.arange(tokens) + src * tokens)[mine])
        top = torch.sort(args["scores"], dim=1, descending=True, stable=True).indices[:, :args["k"]]
        out.append((torch.cat(rows), torch.cat(ids), top))
    return out


def cost(c):
    return Cost(comm=(Comm("all_to_allv", c.nbytes("x")),), memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="contract_v3_tasks.dispatch",
    title="MoE-style dispatch of weighted tokens (contract test)",
    description="Send every token, scaled by its gate weight, to the rank of its expert; return what arrives "
                "(any order) with the tokens' global ids, and the top-k of each own token's integer scores.",
    family="tensor",
    pkb_id=None,
    origin="tests: contract v3 (max_shape, order_by, ties)",
    inputs=(
        Tensor("x", ("T", "D"), doc="this rank's tokens"),
        Tensor("weight", ("T",), dist=Uniform(0.5, 1.0), doc="their gate weights"),
        Tensor("expert", ("T",), dtype="int64", dist=Integers(0, "W"), doc="the rank holding each token's expert"),
        Tensor("scores", ("T", "E"), dtype="int64", dist=Integers(0, 4), doc="integer scores: ties are common"),
        Const("k", dim="K"),
    ),
    outputs=(
        Output("rows", max_shape=("W * T", "D"), order_by="ids",
               doc="x * weight of the tokens routed here, in any order"),
        Output("ids", max_shape=("W * T",), dtype="int64", compare="unordered",
               doc="their global ids (source rank * T + row), row for row"),
        Output("top", ("T", "K"), dtype="int64", ties="the lower index first",
               doc="per own token, the indices of its K highest scores, highest first"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=Relative(1, what="one product per element"),
    presets={"tiny": Preset({"T": 16, "D": 8, "E": 8, "K": 3}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"T": 4096, "D": 1024, "E": 64, "K": 4}, "float32", "16 MiB of tokens per rank")},
    dtypes=("float32",),
)
