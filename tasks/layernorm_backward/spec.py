"""layernorm_backward: LayerNorm weight and bias gradients over tokens split across ranks (PKB 9).

With sequence parallelism every rank normalises its own tokens with the same (replicated) gamma and beta,
so their gradients are sums over all tokens: a column sum on each rank, then an all-reduce (Megatron-LM
all-reduces the sequence-parallel norm gradients over the tensor-parallel group). Small outputs, two
passes over the inputs: the levers are one fused pass that produces both sums and one all-reduce of both
(or a one-shot all-reduce through peer memory) instead of two.
"""
from pkb_env.contract import (Comm, Compute, Cost, Normal, Output, Preset, Propagated, Replicated, Sharded, TaskSpec,
                              Tensor, UnitRows)
from pkb_env.tasks._gemm import DTYPES, split_k_tolerance
from pkb_env.tasks._clauses import own_blocks


def golden(inputs, world):
    """Both column sums over every rank's tokens, in float64, rounded once."""
    x_hat = world.assemble(inputs, "X_hat").double()
    dy = world.assemble(inputs, "dY").double()
    dtype = inputs[0]["dY"].dtype
    d_gamma = world.distribute((dy * x_hat).sum(dim=0).to(dtype), "d_gamma")
    d_beta = world.distribute(dy.sum(dim=0).to(dtype), "d_beta")
    return list(zip(d_gamma, d_beta))


def cost(c):
    """Per rank: one all-reduce of both (N,) sums (they can travel together); 3 FLOPs an element (a
    multiply and two adds); both inputs read once and both outputs written."""
    return Cost(comm=(Comm("all_reduce", c.nbytes("d_gamma") + c.nbytes("d_beta")),),
                compute=(Compute(3 * c["M"] * c["N"], "vector"),),
                memory_bytes=c.io_bytes())


# d_beta: W*M terms of RMS 1, summed per rank in fp32 (torch's sums accumulate there), each rank's sum
# rounded to the dtype, and the W sums added in the dtype by the all-reduce. d_gamma: the same over terms
# of RMS 1/sqrt(N) (rows of X_hat have unit norm), and each product dY * X_hat rounded to the dtype first.
D_BETA = split_k_tolerance("W * M", "W")
D_GAMMA = (Propagated("W * M", "1 / sqrt(N)", what="products dY * X_hat, each rounded to the dtype")
           + split_k_tolerance("W * M", "W", magnitude="1 / sqrt(N)"))

SPEC = TaskSpec(
    name="layernorm_backward",
    title="LayerNorm weight gradients over sequence-parallel tokens (column sums + all-reduce)",
    description="Every rank holds X_hat (M, N), the normalised inputs of its M tokens (rows of unit norm), and "
                "dY (M, N), the gradient of the norm's output for the same tokens. Every rank must return "
                "(d_gamma, d_beta): the sums over all W*M tokens of dY * X_hat and of dY, each (N,).",
    family="tensor",
    parallelism="sequence parallel: gradients of replicated norm weights summed over every rank's tokens",
    pkb_id=9,
    origin="Megatron-LM sequence parallelism (all-reduce of the LayerNorm weight gradients over the "
           "tensor-parallel group)",
    inputs=(
        Tensor("X_hat", ("W * M", "N"), dist=UnitRows(), layout=Sharded(0),
               doc="this rank's tokens' normalised inputs"),
        Tensor("dY", ("W * M", "N"), dist=Normal(), layout=Sharded(0), doc="the output gradient of the same tokens"),
    ),
    outputs=(
        Output("d_gamma", ("N",), layout=Replicated(), tolerance=D_GAMMA, doc="sum over all tokens of dY * X_hat"),
        Output("d_beta", ("N",), layout=Replicated(), tolerance=D_BETA, doc="sum over all tokens of dY"),
    ),
    golden=golden,
    cost=cost,
    tolerance_rule=D_GAMMA,
    clauses=(own_blocks("X_hat", "dY", what="the sums run over every rank's tokens"),),
    presets={
        "tiny": Preset({"M": 8, "N": 16}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"M": 1024, "N": 1024}, "bfloat16", "PKB's shapes: X_hat, dY (1024, 1024) per rank"),
        "large": Preset({"M": 16384, "N": 8192}, "bfloat16",
                        "16K tokens per rank of an 8192-wide model: one pass over 512 MiB of inputs decides"),
    },
    dtypes=DTYPES,
    departures=(
        "inputs come from secret per-trial, per-rank seeds (PKB seeds with 42 + rank + trial, which a "
        "candidate can reproduce to compute its peers' sums without communicating)",
        "X_hat and dY are declared as this rank's tokens (rows) of global (W*M, N) tensors, which is what "
        "PKB's independent per-rank tensors mean; the golden sums over all tokens",
        "a `large` preset (16384 tokens per rank, N=8192) where reading the inputs sets the time",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Pkb  # noqa: E402  (kept apart from the task's own)
PKB = Pkb('layernorm_backward')
