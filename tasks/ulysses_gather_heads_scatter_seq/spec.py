"""ulysses_gather_heads_scatter_seq: head-sharded attention output back to sequence-sharded (PKB 37).

The inverse of ulysses_gather_seq_scatter_heads, after attention: each rank holds every position of its
heads and returns its block of positions with every head, ready for the output projection. The lever is
moving each element once (send sequence blocks straight from x, receive into strided head blocks), or
fusing the exchange with the attention that produces x or the projection that consumes the result.
"""
from pkb_env.contract import Const, Group, Output, Preset, Sharded, Tensor
from pkb_env.tasks._ulysses import HEADS_LARGE, relayout, ulysses_primitive


SPEC = ulysses_primitive(
    name="ulysses_gather_heads_scatter_seq",
    title="Ulysses gather heads, scatter sequence",
    description="Every rank holds x (B, S, H, E), every position of its block of H heads (heads r*H to "
                "(r+1)*H-1 on rank r); rank r must return (B, S/W, W*H, E): positions r*S/W to (r+1)*S/W-1 "
                "with all W*H heads in order.",
    pkb_id=37,
    inputs=(
        Tensor("x", ("B", "S", "W * H", "E"), layout=Sharded(2), doc="every position, this rank's heads"),
        Const("seq_dim", 1),
        Const("head_dim", 2),
        Group("group", "world"),
    ),
    outputs=(Output("out", ("B", "S", "W * H", "E"), layout=Sharded(1),
                    doc="this rank's block of positions, every head"),),
    golden=relayout,
    collective="all_to_all", size="x",
    presets={"tiny": Preset({"B": 2, "S": 24, "H": 2, "E": 2}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"B": 16, "S": 16, "H": 8, "E": 64}, "bfloat16",
                             "PKB's shapes: 16 sequences of 16 tokens, 8 heads of 64 per rank; latency-bound"),
             "large": Preset({"B": 1, "S": 4096, "H": 32, "E": 128}, "bfloat16", HEADS_LARGE)},
    departures=("PKB pads a sequence that W does not divide with zero rows; here S/W must divide, as it does "
                "for PKB's shapes at its world sizes, so no rank returns padding",),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('ulysses_gather_heads_scatter_seq')
