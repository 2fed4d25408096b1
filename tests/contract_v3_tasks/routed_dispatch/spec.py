"""routed_dispatch: MoE dispatch over an expert group, with top-k routing drawn jointly (contract v3 example).

The routing (`Routing("route", ...)`) is drawn per call over each expert-parallel group: skewed expert
popularity, top-2 of 4 experts, 2 experts per rank; each rank receives its tokens' picks and the send and
receive counts, which agree across the group. The mesh is sized by the preset (`ep = min(G, W)`), so at
W = 4 two groups of 2 route independently. The cost model reads the busiest rank's realised load.
"""
import torch

from pkb_env.contract import Comm, Const, Cost, Exact, Group, Mesh, Output, Preset, Routed, Routing, TaskSpec, Tensor


def golden(inputs, world):
    outs = []
    for r in range(world.world_size):
        group, me = world.layout.group_of("ep", r), world.coords(r)
        per = world["E"] // len(group)
        rows = []
        for s in group:
            idx = inputs[s]["topk_idx"]
            for t in range(idx.shape[0]):
                for j in range(idx.shape[1]):
                    if int(idx[t, j]) // per == me["ep"]:
                        rows.append(inputs[s]["x"][t])
        outs.append(torch.stack(rows) if rows else inputs[r]["x"].new_empty((0, world["D"])))
    return outs


def cost(c):
    """One all-to-all-v over the expert group: the busiest rank's rows to or from other ranks."""
    load = c.routing("route")
    return Cost(comm=(Comm("all_to_allv", load.offrank_pairs * c["D"] * c.elem, "ep"),),
                memory_bytes=c.nbytes("x") + load.received_pairs * c["D"] * c.elem)


SPEC = TaskSpec(
    name="contract_v3_tasks.routed_dispatch",
    title="MoE dispatch over an expert group",
    description="Every rank holds x (T, D) and its tokens' top-K experts; send each (token, expert) pair's row "
                "to the rank of the expert group that holds the expert; return the rows received, ordered by "
                "source rank, then token, then pick.",
    family="collective",
    pkb_id=None,
    origin="contract v3 example (tests); the pattern of PKB 27-29",
    parallelism="expert parallel inside data parallel",
    mesh=Mesh(("dp", "W / ep"), ("ep", "min(G, W)")),
    routings=(Routing("route", tokens="T", experts="E", k="K", group="ep", skew=1.0,
                      doc="skewed popularity: hot experts change per call"),),
    inputs=(Tensor("x", ("T", "D"), doc="this rank's tokens"),
            Tensor("topk_idx", ("T", "K"), "int64", Routed("route", "topk_idx")),
            Tensor("send_counts", ("ep",), "int64", Routed("route", "send_counts")),
            Tensor("recv_counts", ("ep",), "int64", Routed("route", "recv_counts")),
            Const("num_experts", dim="E"),
            Group("ep_group", "ep")),
    outputs=(Output("out", None, compare="exact", max_shape=("ep * T * K", "D"),
                    doc="the rows received: at most every pick of the group's ranks"),),
    golden=golden,
    cost=cost,
    tolerance_rule=Exact(),
    presets={"tiny": Preset({"G": 2, "E": 4, "K": 2, "T": 8, "D": 4}, "float32", "two groups of 2 at W = 4"),
             "bench": Preset({"G": 8, "E": 64, "K": 8, "T": 4096, "D": 2048}, "bfloat16", "DeepSeek-like")},
    dtypes=("float32", "bfloat16"),
)
