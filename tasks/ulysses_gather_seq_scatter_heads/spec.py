"""ulysses_gather_seq_scatter_heads: sequence-sharded activations to head-sharded, before attention (PKB 36).

Each rank holds all heads of its block of positions; after the all-to-all it holds all positions of its
block of heads, so attention runs locally per head. The lever is moving each element once: send from x's
strided head blocks and receive into the output's sequence blocks without staging copies, or fuse the
exchange into the projection that produces x or the attention that consumes it.
"""
from pkb_env.contract import Const, Group, Output, Sharded, Tensor
from pkb_env.tasks._ulysses import head_presets, relayout, ulysses_primitive


SPEC = ulysses_primitive(
    name="ulysses_gather_seq_scatter_heads",
    title="Ulysses gather sequence, scatter heads",
    description="Every rank holds x (B, S, H, E), its block of S positions of a W*S-token sequence with all H "
                "heads; rank r must return (B, W*S, H/W, E): every position, in order, of heads r*H/W to "
                "(r+1)*H/W-1.",
    pkb_id=36,
    inputs=(
        Tensor("x", ("B", "W * S", "H", "E"), layout=Sharded(1), doc="this rank's positions, all heads"),
        Const("seq_dim", 1),
        Const("head_dim", 2),
        Group("group", "world"),
    ),
    outputs=(Output("out", ("B", "W * S", "H", "E"), layout=Sharded(2),
                    doc="every position of this rank's block of heads"),),
    golden=relayout,
    collective="all_to_all", size="x",
    presets=head_presets(),
    departures=("PKB's unpadded_dim_size argument is dropped: it is 0 in every trial (no padding to remove)",),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('ulysses_gather_seq_scatter_heads')
