"""expert_groups: a mesh sized by a preset dim, and groups over one and over two of its dimensions.

Contract v3's mesh (docs/task_contract.md, "Meshes and process groups"): the expert-parallel dimension is as wide as
the experts allow, `ep = min(E, W)`, data parallelism takes the rest, `dp = W / ep`; a group over `ep` (narrower
than the world where E < W) and one over `("dp", "ep")`. A world size that does not factor (E = 2 at W = 3) is
refused, naming `dp`.
"""
from pkb_env.contract import Comm, Cost, Group, Mesh, Output, PerRank, Preset, Replicated, Sum, TaskSpec, Tensor


def golden(inputs, world):
    outs = []
    for r in range(world.world_size):
        peers = world.layout.group_of("ep", r)
        in_ep = sum(inputs[q]["x"].double() for q in peers).to(inputs[r]["x"].dtype)
        everywhere = sum(a["x"].double() for a in inputs).to(inputs[r]["x"].dtype)
        outs.append((in_ep, everywhere))
    return outs


def cost(c):
    return Cost(comm=(Comm("all_reduce", c.nbytes("x"), "ep"), Comm("all_reduce", c.nbytes("x"), ("dp", "ep"))),
                memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="contract_v3_tasks.expert_groups",
    title="Sums over an expert group and over dp x ep",
    description="Every rank holds x (T, D); return its sum over the rank's expert-parallel group and over "
                "every rank (the group spanning dp and ep).",
    family="collective",
    pkb_id=None,
    origin="contract v3 example (tests)",
    parallelism="expert parallel inside data parallel",
    mesh=Mesh(("dp", "W / ep"), ("ep", "min(E, W)")),
    inputs=(Tensor("x", ("T", "D")),
            Group("ep_group", "ep", doc="the ranks of this rank's expert-parallel group"),
            Group("world_group", ("dp", "ep"), doc="every rank: the group over dp and ep")),
    outputs=(Output("in_ep", ("T", "D"), layout=PerRank("dp")),
             Output("everywhere", ("T", "D"), layout=Replicated())),
    golden=golden,
    cost=cost,
    tolerance_rule=Sum("W", 1, "dtype", what="the sums"),
    presets={"tiny": Preset({"E": 2, "T": 4, "D": 8}, "float32", "ep = 2: narrower than W at W = 4"),
             "bench": Preset({"E": 8, "T": 1024, "D": 1024}, "bfloat16", "ep = min(8, W)")},
    dtypes=("float32", "bfloat16"),
)
