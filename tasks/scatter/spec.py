"""scatter: the root's W chunks, chunk r delivered to rank r; the root changes per trial (PKB problem 5)."""
from pkb_env.task import InputContext, Traffic
from pkb_env.tasks._primitives import EXACT_TOLERANCES, draw_root, primitive


def make_inputs(ctx: InputContext):
    m, n = ctx.dims["M"], ctx.dims["N"]
    src = draw_root(ctx)
    # Every rank gets chunks of its own: only src's are meaningful, the rest catch reads of local data.
    return (ctx.randn(ctx.world_size, m, n), src)


def golden(inputs, world_size):
    src = inputs[0][1]
    return [inputs[src][0][rank].clone() for rank in range(world_size)]


def traffic(world_size, dims, elem_bytes):
    # nccl-tests scatter_perf: S is the root's whole send buffer (W chunks of M x N), bus factor (n-1)/n,
    # i.e. bus bytes are the W-1 chunks the root must send to the other ranks.
    size = world_size * dims["M"] * dims["N"] * elem_bytes
    return Traffic("scatter", size, (world_size - 1) * size // world_size)


SPEC = primitive(
    name="scatter",
    title="Scatter",
    description="Every rank holds a (W, M, N) tensor of chunks and the same root rank `src`; rank r must "
                "return rank src's chunk r. The chunks held by other ranks hold unrelated values and must "
                "be ignored.",
    origin="NCCL/torch.distributed scatter",
    pkb_id=5,
    make_inputs=make_inputs,
    golden=golden,
    traffic=traffic,
    bench_note="2 MiB out",
    tolerances=EXACT_TOLERANCES,
    inputs_doc="chunks: (W, M, N) standard-normal values, different on every rank, only rank src's used; "
               "src: Python int in [0, W), the same on every rank, drawn per trial",
    outputs_doc="(M, N), same dtype: on rank r, rank src's chunks[r]",
)
