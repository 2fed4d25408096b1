"""rope_allgather: rotary embedding on a sequence block, then an all-gather along the sequence (PKB 17).

Context parallelism by all-gather (as Llama 3's long-context training gathers keys and values): each rank
rotates the queries and keys of its positions, then every rank collects the whole sequence. An
element-wise op and a gather: the lever is fusing them (rotate while writing into peers' buffers, q and
k in one launch) so that the data crosses HBM and the links once.
"""
import torch

from pkb_env.contract import Comm, Compute, Cost, Output, Preset, Replicated, Rounded, Sharded, TaskSpec, Tensor
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """The rotation of the whole sequence in float64, rounded once, on every rank."""
    cos = world.assemble(inputs, "cos").double().unsqueeze(2)
    sin = world.assemble(inputs, "sin").double().unsqueeze(2)
    dtype = inputs[0]["q"].dtype

    def rotated(name):
        x = world.assemble(inputs, name).double()
        first, second = x.chunk(2, dim=-1)
        return world.distribute((x * cos + torch.cat((-second, first), dim=-1) * sin).to(dtype), f"{name}_rot")

    return list(zip(rotated("q"), rotated("k")))


def cost(c):
    """Per rank: one all-gather of both rotated tensors (S = their full size; they can travel together);
    3 FLOPs an element of its block of q and k; inputs read and outputs written once."""
    block = c["B"] * c["S"] // c["W"] * c["H"] * c["E"]
    return Cost(comm=(Comm("all_gather", c.nbytes("q_rot") + c.nbytes("k_rot")),),
                compute=(Compute(3 * 2 * block, "vector"),),
                memory_bytes=c.io_bytes())


SEQUENCE = dict(layout=Sharded(1), doc="this rank's block of positions")

SPEC = TaskSpec(
    name="rope_allgather",
    title="Rotary embedding + all-gather along the sequence",
    description="Every rank holds q, k (B, S/W, H, E) and cos, sin (B, S/W, E) for its block of positions "
                "[r*S/W, (r+1)*S/W). Every rank must return (q_rot, k_rot), each (B, S, H, E): "
                "x * cos + rotate_half(x) * sin over the whole sequence (rotate_half(x) = cat(-x2, x1) of "
                "the two halves of the last dimension; cos and sin shared by the heads).",
    family="context",
    parallelism="context parallel: rotary embedding on sequence blocks, then an all-gather of q and k",
    pkb_id=17,
    origin="HuggingFace transformers apply_rotary_pos_emb, followed by the all-gather of all-gather-based "
           "context parallelism",
    inputs=(
        Tensor("q", ("B", "S", "H", "E"), **SEQUENCE),
        Tensor("k", ("B", "S", "H", "E"), **SEQUENCE),
        Tensor("cos", ("B", "S", "E"), **SEQUENCE),
        Tensor("sin", ("B", "S", "E"), **SEQUENCE),
    ),
    outputs=(
        Output("q_rot", ("B", "S", "H", "E"), layout=Replicated(), doc="rotated queries, whole sequence"),
        Output("k_rot", ("B", "S", "H", "E"), layout=Replicated(), doc="rotated keys, whole sequence"),
    ),
    golden=golden,
    cost=cost,
    # x * cos and rotate_half(x) * sin (RMS 1 each) and their sum (RMS sqrt(2)) are each rounded once.
    tolerance_rule=Rounded(3, "sqrt(2)", what="the two products and their sum, each rounded to the dtype"),
    clauses=(own_blocks("q", "k", "cos", "sin", what="every position block is gathered"),),
    presets={
        "tiny": Preset({"B": 2, "S": 24, "H": 2, "E": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"B": 16, "S": 16, "H": 8, "E": 64}, "bfloat16",
                        "PKB's shapes: q, k (16, 16/W, 8, 64) per rank; latency-bound"),
        "large": Preset({"B": 1, "S": 16384, "H": 32, "E": 128}, "bfloat16",
                        "a 16K-token sequence, 32 heads of 128: 256 MiB gathered, bandwidth-bound"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to rotate its peers' blocks without communicating)",
        "cos and sin stay random, as in PKB, rather than tables of angles: two inputs drawn from "
        "independent seeds cannot share angles, and random values keep every element of the math live",
        "a `large` preset (one 16K-token sequence, 32 heads of 128) where the gather's bytes set the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Pkb  # noqa: E402  (kept apart from the task's own)

PKB = Pkb("rope_allgather", params=(Arg("q_local", "q"), Arg("k_local", "k"), Arg("cos_local", "cos"),
                                     Arg("sin_local", "sin")))
