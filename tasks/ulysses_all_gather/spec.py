"""ulysses_all_gather: every rank's sequence block, gathered along dim 0 on every rank (PKB 34).

What Ulysses uses to rebuild a full sequence (position ids, a gathered activation) from the ranks' blocks.
The bound is the interconnect; the lever is fewer launches and copies (gather straight into the output,
or read peers' blocks from symmetric memory).
"""
from pkb_env.contract import Group, Output, Replicated, Sharded, Tensor
from pkb_env.tasks._primitives import presets
from pkb_env.tasks._ulysses import relayout, ulysses_primitive


SPEC = ulysses_primitive(
    name="ulysses_all_gather",
    title="Ulysses all-gather into a tensor",
    description="Every rank holds an (M, N) block of a sequence (block r on rank r); every rank must return "
                "the (W*M, N) concatenation of all blocks in rank order.",
    pkb_id=34,
    inputs=(
        Tensor("x", ("W * M", "N"), layout=Sharded(0), doc="this rank's block of rows"),
        Group("group", "world"),
    ),
    outputs=(Output("out", ("W * M", "N"), layout=Replicated(), doc="rows r*M to (r+1)*M-1 are rank r's x"),),
    golden=relayout,
    collective="all_gather", size="out",
    presets=presets("2 MiB in per rank"),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('ulysses_all_gather_into_tensor_primitive')
