"""openclip_contrastive_loss: OpenCLIP's SigLIP (sigmoid) image-text loss over a batch split across
ranks, the text features passed around a bidirectional ring (PKB 58).

SigLIP scores every image of the global batch against every text with an independent sigmoid (label +1
for the matching pair on the diagonal, -1 elsewhere), so unlike CLIP's softmax it needs no normaliser over
the batch: each rank adds its own images' terms against each block of texts as the block passes by.
OpenCLIP's `dist_impl="bidir"` sends the block at hand to both neighbours at once, so every block is seen
after ceil((W-1)/2) steps instead of W-1; where W is even the last step is one-way (the block opposite
the rank, from the left).

Levers. The work is one (M/W, M) logits matrix per rank (a GEMM of K = N) followed by an elementwise
log-sigmoid and a sum: fuse them (flash-style, the logits never written to HBM), overlap each block's GEMM
with the next block's transfer, or gather all text blocks through peer memory in one step. The bound is
W-1 text blocks into each rank and the GEMM.
"""
import torch
import torch.nn.functional as F

from pkb_env.contract import (Comm, Compute, Const, Cost, Custom, Group, Output, PerRank, Preset, Relative, Sharded,
                              TaskSpec, Tensor)
from pkb_env.tasks._clauses import own_blocks, sixteen_bit

SCALE, BIAS = 10.0, -10.0


def _shared_direction(shape, device):
    """(1, ..., 1) / sqrt(N): the direction every feature leans towards (fixed, not drawn)."""
    return torch.full(shape[-1:], shape[-1] ** -0.5, device=device)


def _image_features(gen, shape, dtype, env):
    """normalize(d + z), z ~ N(0, I/N), d the shared direction: unrelated features have cosine ~0.5, as the
    embeddings of a trained CLIP tower lean into a narrow cone."""
    z = torch.randn(shape, generator=gen, device=gen.device) * shape[-1] ** -0.5
    return F.normalize(_shared_direction(shape, gen.device) + z, dim=-1).to(dtype)


def _text_features(gen, shape, dtype, env, given):
    """normalize(x + w) for the row's image x and a generic feature w drawn like an image: the matching pair
    has cosine ~0.87, a text and an unrelated image ~0.58."""
    image = given.values["image_features"].float()
    generic = _image_features(gen, shape, torch.float32, env)
    return F.normalize(image + generic, dim=-1).to(dtype)


def golden(inputs, world):
    """The full (M, M) logits of the assembled features in float64; each rank's rows summed and divided by
    the local batch size, rounded once to fp32."""
    images = world.assemble(inputs, "image_features").double()
    texts = world.assemble(inputs, "text_features").double()
    args = inputs[0]
    logits = args["logit_scale"] * images @ texts.T + args["logit_bias"]
    labels = 2 * torch.eye(logits.shape[0], dtype=torch.float64) - 1
    per_image = -F.logsigmoid(labels * logits).sum(dim=1)
    return [part.sum().div(part.numel()).float() for part in per_image.chunk(world.world_size)]


def cost(c):
    """Per rank: the W-1 other ranks' text blocks in (an all-gather's bytes; moving image blocks instead
    costs the same); the (M/W, M) logits as a GEMM over N; about 8 FLOPs a logit for the scale, bias, sign
    and log-sigmoid (exp, log1p) and the sum; the features read once."""
    rows = c["M"] // c["W"]
    return Cost(
        comm=(Comm("all_gather", c["W"] * c.nbytes("text_features")),),
        compute=(Compute(2 * rows * c["M"] * c["N"], "matmul"), Compute(8 * rows * c["M"], "vector")),
        memory_bytes=c.io_bytes(),
    )


# Every term of the loss is positive, so a sum in any order rounds relative to the total. The error that
# differs between correct arrangements: each logit's fp32 dot product over N (about sqrt(N) roundings of the
# cosine, times the logit scale, reaching a term's log-sigmoid about one to one), the log-sigmoids and the
# sums over M/W x M terms in any order (sequential, pairwise or atomic). Measured on emulated arrangements
# (dot products accumulated in chunks of 1 or 16, sums sequential or pairwise): 1-3.5 u of the loss at tiny
# and bench. The reference (benchmarks/tolerance_margins.py): 0.12-0.23 of the allowance at tiny (fp32, 100
# trials, W = 2, 3, 4, 8), 0.04 at bench (every dtype, W = 2, 4, 8): bench's rule is looser (48 u) for GPU
# arrangements (tensor-core accumulation over N = 1024) that CPU ranks cannot measure. Wrong answers are far
# outside it: a text block skipped moves the loss by more than 1e-2 of itself, logits rounded to bf16 by
# ~1e-4 (2500 u).
TOLERANCE = Relative("sqrt(N) + 16", "float32",
                     what="the logits' fp32 dot products over N, the log-sigmoids and the sum of M/W x M positive "
                          "terms in any order")

SPEC = TaskSpec(
    name="openclip_contrastive_loss",
    title="OpenCLIP SigLIP loss over a batch split across ranks (bidirectional ring of text features)",
    description="Every rank holds image_features and text_features (M/W, N): its M/W matching image-text pairs of "
                "a global batch of M (row i of both is a pair), rows L2-normalised. In fp32 (dot products "
                "accumulated in fp32, the logits never rounded to the features' dtype): logits = logit_scale * "
                "image @ text^T + logit_bias for this rank's images against the texts of every rank, label +1 for "
                "an image's own text and -1 for every other; each rank must return its loss = -sum(logsigmoid("
                "label * logits)) over its M/W images and all M texts, divided by M/W (OpenCLIP divides by the "
                "local batch size), a 0-dim fp32 tensor (ranks' losses differ).",
    family="data",
    parallelism="data parallel: a contrastive loss over the global batch, text features passed around a ring",
    pkb_id=58,
    origin="OpenCLIP SigLipLoss (dist_impl='bidir': neighbour_exchange_bidir, a one-way last step at even W)",
    inputs=(
        Tensor("image_features", ("M", "N"), layout=Sharded(0), dist=Custom(
            _image_features, "rows normalize(d + z), z ~ N(0, I/N), d = (1, ..., 1)/sqrt(N): unrelated features "
                             "have cosine ~0.5"),
               doc="this rank's images' embeddings, rows of unit norm"),
        Tensor("text_features", ("M", "N"), layout=Sharded(0), dist=Custom(
            _text_features, "rows normalize(x + g), x the row's image feature, g drawn like an image feature: the "
                            "matching pair has cosine ~0.87, other pairs ~0.58", reads=("image_features",)),
               doc="this rank's texts' embeddings (row i matches image row i), rows of unit norm"),
        Const("logit_scale", SCALE, doc="the logit scale, exp of SigLIP's learned log-scale at its init log(10)"),
        Const("logit_bias", BIAS, doc="the logit bias, SigLIP's init -10"),
        Group("group", "world", doc="the data-parallel ranks, in ring order"),
    ),
    outputs=(Output("loss", (), dtype="float32", layout=PerRank(),
                    doc="this rank's SigLIP loss: its images against all M texts, divided by M/W"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("image_features", "text_features", what="every rank's texts are the negatives"),
             sixteen_bit("fp32_logits", "dot products accumulated in fp32, the logits never rounded to the "
                         "features' dtype")),
    presets={
        "tiny": Preset({"M": 48, "N": 16}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024}, "bfloat16",
                        "PKB's shapes: a global batch of 1024 pairs, 1024-wide embeddings (M/W rows a rank); "
                        "latency- and launch-bound"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a candidate "
        "can reproduce to make its peers' text features without communicating)",
        "the features lean towards a shared direction and each text towards its image (cosines ~0.58 and ~0.87; "
        "PKB draws independent normalised normals, whose cosines are ~0 at N = 1024): with PKB's features every "
        "logit off the diagonal is ~-10, the other ranks' texts add ~5e-5 each, and a rank that skips the whole "
        "ring is off by 0.04 of ~10 (M = 1024, W = 4), inside PKB's atol + rtol of 0.11; here they make most of "
        "the loss",
        "the logits, log-sigmoids, sum and loss are fp32 whatever the features' dtype (PKB computes them in the "
        "features' dtype and returns a bf16 loss, whose step at ~16 is 0.06); the golden is float64",
        "the ring's process group is an input the judge builds (PKB passes None for the default group: the same "
        "ranks); logit_scale and logit_bias are PKB's 10 and -10",
        "the reference overlaps each step's transfer with the loss of the blocks at hand (OpenCLIP and PKB wait "
        "for the exchange first)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb, Ret  # noqa: E402  (kept apart from the task's own)
from pkb_env.tasks._pkb import in_dtype  # noqa: E402

PKB = Pkb("openclip_contrastive_loss",
          returns=(Ret("loss", to="float32", text="cast to float32: PKB returns the features' dtype"),),
          differs=in_dtype("the logits, log-sigmoids and loss", "the loss",
                           "a bf16 loss of ~16 rounds to steps of 0.06", "the logits, log-sigmoids, sum and loss"),
          variant="pkb")
