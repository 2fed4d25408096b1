"""ulysses_all_to_all: an all-to-all that scatters one dim of a tensor and gathers another (PKB 33).

The primitive under every Ulysses layout change: rank r keeps block r of every rank's tensor along the
scattered dim and lays the blocks side by side along the gathered dim. With x (M, N), scatter 0 and gather
1, rank r returns row block r of every rank's x as (M/W, W*N). The lever is moving each element once:
send straight from x's row blocks (contiguous already) and receive into the strided column blocks of the
output, with no staging copy on either side.
"""
import torch

from pkb_env.contract import Const, Group, Output, Preset, Tensor
from pkb_env.tasks._primitives import presets
from pkb_env.tasks._ulysses import ulysses_primitive


def golden(inputs, world):
    w = world.world_size
    return [torch.cat([args["x"].chunk(w, dim=0)[r] for args in inputs], dim=1) for r in range(w)]


SPEC = ulysses_primitive(
    name="ulysses_all_to_all",
    title="Ulysses all-to-all (scatter rows, gather columns)",
    description="Every rank holds x (M, N); rank r must return (M/W, W*N): row block r of every rank's x, "
                "side by side in rank order (columns s*N to (s+1)*N-1 from rank s).",
    pkb_id=33,
    inputs=(
        Tensor("x", ("M", "N"), doc="row block j goes to rank j"),
        Const("scatter_dim", 0),
        Const("gather_dim", 1),
        Group("group", "world"),
    ),
    outputs=(Output("out", ("M / W", "W * N"), doc="row block r of every rank's x, side by side"),),
    golden=golden,
    collective="all_to_all", size="x",
    presets={**presets("2 MiB in per rank"),
             "tiny": Preset({"M": 24, "N": 8}, "float32", "CPU ranks, milliseconds; M/W divides at W = 1-4, 6, 8")},
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('ulysses_all_to_all_tensor_primitive')
