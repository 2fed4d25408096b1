"""ulysses_gather_seq_scatter_heads_qkv: a packed q/k/v projection, sequence-sharded to head-sharded (PKB 38).

The layout change Ulysses makes right after a fused QKV projection: the last dim holds [q | k | v], each
H heads of E, and every rank must end with all positions of its heads for all three. The lever is one
exchange with each element moved once: the head blocks are strided inside each of q, k and v, so a
naive version copies twice around the all-to-all.
"""
import torch

from pkb_env.contract import Const, Group, Output, Sharded, Tensor
from pkb_env.tasks._ulysses import head_presets, ulysses_primitive


def golden(inputs, world):
    """The gathered sequence (B, W*S, 3, H*E); rank r keeps feature block r of each of q, k and v."""
    full = world.assemble(inputs, "qkv")
    parts = full.view(*full.shape[:-1], 3, -1)
    w = world.world_size
    return [torch.flatten(parts.chunk(w, dim=-1)[r], -2).clone() for r in range(w)]


SPEC = ulysses_primitive(
    name="ulysses_gather_seq_scatter_heads_qkv",
    title="Ulysses gather sequence, scatter heads (packed QKV)",
    description="Every rank holds qkv (B, S, 3*H*E), its block of S positions with features [q | k | v] for "
                "H heads of E; rank r must return (B, W*S, 3*(H/W)*E): every position of heads r*H/W to "
                "(r+1)*H/W-1, features [q | k | v] of those heads.",
    pkb_id=38,
    inputs=(
        Tensor("qkv", ("B", "W * S", "3 * H * E"), layout=Sharded(1), doc="this rank's positions, [q | k | v]"),
        Const("seq_dim", 1),
        Group("group", "world"),
    ),
    outputs=(Output("out", ("B", "W * S", "3 * (H / W) * E"), doc="[q | k | v] of this rank's heads, every position"),),
    golden=golden,
    collective="all_to_all", size="qkv",
    presets=head_presets(),
    departures=("PKB's unpadded_dim_size (None) and restore_shape (True) arguments are dropped: they are the "
                "same in every trial",),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("ulysses_gather_seq_scatter_heads_qkv", params=(Arg("qkv_tensor", "qkv"), Arg("seq_dim"), Arg("group")))
