"""magi1_cso_async_attention: MAGI-1's context-shuffled attention, all-to-alls overlapped with attention
(PKB 77).

MAGI-1 generates video chunk by chunk; its context parallelism ("context shuffle overlap") gives every rank
an equal share of every chunk's tokens, so each rank carries the same load whatever the attention pattern.
Attention runs head-parallel: keys and values move to head-parallel form once, then range by range the
queries move over (all-to-all) while the previous range is attended and its output moves back. The
lever: hiding every all-to-all behind attention, or, at small W, not moving queries at all (gathering the
keys and values is fewer bytes there).
"""
import torch

from pkb_env.contract import (Comm, Compute, Cost, Custom, Group, Output, Preset, Replicated, Rounded, Sharded, Sum,
                              TaskSpec, Tensor, WorldSizes)
from pkb_env.tasks._attention import attention, attention_flops
from pkb_env.tasks._clauses import own_blocks


def _key_ranges(gen, shape, dtype, env):
    """Range r attends its own chunk whole and a random stretch of the earlier ones: [start_r, (r+1)*N) with
    start_r uniform in [0, r*N]."""
    ranges, tokens = shape[0], int(env["N"])
    ends = torch.arange(1, ranges + 1, device=gen.device) * tokens
    draws = torch.rand(ranges, generator=gen, device=gen.device)
    starts = (draws * (ends - tokens + 1)).long().clamp_max(ends - tokens)
    return torch.stack([starts, ends], dim=1).to(dtype)


SCORES_PER_BLOCK = 1 << 27   # float64 scores held at once by the golden (1 GiB), whatever the size


def golden(inputs, world):
    """Every range's attention over its key range, every head, in float64 on the global tensors, a block of
    queries at a time (bench's ranges hold 21600 queries against up to 86400 keys)."""
    query = world.assemble(inputs, "query")                                    # (R, N, Hq, D)
    key_value = world.assemble(inputs, "key_value").double()                   # (R, N, Hkv, 2D)
    ranges, tokens, heads, head_dim = query.shape
    kv = key_value.reshape(ranges * tokens, -1, 2 * head_dim).repeat_interleave(heads // key_value.shape[2], 1)
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    for r, (start, end) in enumerate(inputs[0]["k_ranges"].tolist()):
        keys, values = kv[start:end, :, :head_dim], kv[start:end, :, head_dim:]
        rows = max(1, SCORES_PER_BLOCK // (heads * (end - start)))
        for first in range(0, tokens, rows):
            block, _ = attention(query[None, r, first:first + rows], keys[None], values[None])
            out[r, first:first + rows] = block[0]
    return world.distribute(out, "out")


def cost(c):
    """Two ways to bring every query together with its keys: head-parallel (all-to-alls of the keys and
    values, the queries and the outputs; the outputs wait for the attention, so two rounds) or
    token-parallel (one all-gather of every key and value; queries stay). The cheaper is charged. FLOPs:
    each range attends at least its own chunk (N x N per head), split over the ranks."""
    r, n, hq, hkv, d, w = c["R"], c["N"], c["HQ"], c["HKV"], c["D"], c["W"]
    gather = r * n * hkv * 2 * d * c.elem                        # all-gather S: every key and value
    swap = r * n // w * (hkv * 2 * d + 2 * hq * d) * c.elem       # all-to-all S: kv, queries and outputs
    return Cost(comm=c.cheapest((Comm("all_gather", gather),), (Comm("all_to_all", swap, steps=2),)),
                compute=(Compute(r * attention_flops(1, hq, d, n, causal=False) / w, "matmul"),),
                memory_bytes=c.io_bytes())


# Attention averages values over thousands of keys with weights ~e^s / Z, so outputs have RMS ~sqrt(e / keys)
# <= sqrt(3 / N). A flash kernel rounds the probabilities to the dtype before P V (relative u each, random
# signs: ~u times the output's RMS) and rounds the output; in float32 the P V sums over up to R*N keys show.
TOLERANCE = (Rounded(4, "sqrt(3 / N)", what="probabilities and output rounded to the dtype (flash attention), "
                                            "on outputs of RMS <= sqrt(3/N)")
             + Sum("R * N", "sqrt(3 / N) / sqrt(R * N)", "float32",
                   what="P V over up to R*N keys in fp32"))

SPEC = TaskSpec(
    name="magi1_cso_async_attention",
    title="MAGI-1 context-shuffled attention, all-to-alls overlapped",
    description="A sequence of R ranges (video chunks) of N tokens; every rank holds positions r*N/W to "
                "(r+1)*N/W - 1 ... of each range: query (R, N/W, Hq, D) and key_value (R, N/W, Hkv, 2D) "
                "(keys, then values), and k_ranges (R, 2). Every rank must return, for its tokens of every "
                "range and every query head, softmax(q k^T / sqrt(D)) v over the keys at positions "
                "[k_ranges[r, 0], k_ranges[r, 1]) of the whole range-major sequence of R*N tokens (query head "
                "h uses key head h // (Hq / Hkv)): (R, N/W, Hq, D) in query's dtype.",
    family="context",
    parallelism="context parallel: every rank holds a share of every chunk; head-parallel attention by all-to-all",
    pkb_id=77,
    origin="MAGI-1 (Sand AI) context-shuffle-overlap (CSO) attention",
    inputs=(
        Tensor("query", ("R", "N", "HQ", "D"), layout=Sharded(1), doc="this rank's tokens of every range"),
        Tensor("key_value", ("R", "N", "HKV", "2 * D"), layout=Sharded(1),
               doc="keys (first D) and values (last D) of this rank's tokens"),
        Tensor("k_ranges", ("R", 2), dtype="int64", layout=Replicated(),
               dist=Custom(_key_ranges, "range r: [start_r, (r+1)*N) with start_r uniform in [0, r*N]",
                           kinds=frozenset({"int"})),
               doc="key positions each range attends, half-open, over the R*N tokens"),
        Group("group", "world", doc="the context-parallel group"),
    ),
    outputs=(Output("out", ("R", "N", "HQ", "D"), layout=Sharded(1), doc="attention output, this rank's tokens"),),
    golden=golden,
    cost=cost,
    tolerance_rule=TOLERANCE,
    clauses=(own_blocks("query", "key_value", what="every rank's tokens of every range"),),
    presets={
        "tiny": Preset({"R": 4, "N": 16, "HQ": 16, "HKV": 8, "D": 8}, "float32", "CPU ranks, milliseconds"),
        "bench": Preset({"R": 4, "N": 21600, "HQ": 48, "HKV": 8, "D": 128}, "bfloat16",
                        "PKB's W = 8 shapes at every W: 4 ranges of 21600 tokens, 48 query heads, 8 key heads "
                        "of 128; attention dominates"),
    },
    dtypes=("float32", "bfloat16", "float16"),
    world_sizes=WorldSizes(splits=("HKV",), reason="head-parallel attention gives every rank HKV/W key heads"),
    departures=(
        "one size at every world size, PKB's W = 8 shapes (48 query heads, 21600 tokens per range), which "
        "divide evenly at W = 2, 4 and 8; PKB switches to 24 heads and 12150 tokens at W <= 4, which pads a "
        "range's tokens at W = 4 (the padding queries are computed, the padding keys clipped). So `bench` "
        "runs at W >= 4: at W = 2 a rank's output is 506 MiB in bf16, above what the judge takes from one "
        "call (256 MiB); and only on GPUs (2.3e13 FLOPs per rank and call at W = 2, beyond a CPU reference)",
        "query and key_value are declared per range, (R, N/W, heads, dim); PKB flattens ranges and tokens "
        "into one axis and passes cp_shuffle_num and clip_token_nums, which the shapes now carry",
        "k_ranges are drawn per trial (range r attends [start_r, (r+1)*N), start_r uniform in [0, r*N], so "
        "a range sees its own chunk and a random stretch of earlier ones, as MAGI-1's chunk-causal "
        "attention does); PKB fixes them to each range's own chunk, a pattern a candidate can hard-code",
        "inputs come from secret per-trial seeds; the process group is declared and passed in (PKB: None)",
        "the reference pipelines the same all-to-alls more plainly: the next range's queries and the last "
        "range's outputs are in flight during each attention, as separate all-to-alls (PKB packs them into one)",
    ),
)

# -- PKB's call and outputs mapped onto this task's (docs/pkb_compat.md) -----------------------------------------------
from pkb_env.contract import Arg, Computed, Harness, Pkb, Ret, Sizes  # noqa: E402  (kept apart from the task's own)


def _pkb_tokens(name):
    """PKB passes this rank's tokens of every range as one (R * N/W, heads, dim) tensor, range-major."""
    return lambda call: call.values[name].flatten(0, 1)


PKB = Pkb("magi1_cso_async_attention",
          params=(Computed("query", _pkb_tokens("query"), "(R * N/W, HQ, D), range-major"),
                  Computed("key_value", _pkb_tokens("key_value"), "(R * N/W, HKV, 2 D), range-major"),
                  Arg("k_ranges"), Harness("cp_shuffle_num", Sizes("R", single=True)),
                  Harness("clip_token_nums", Sizes("N", single=True)), Arg("group")),
          returns=(Ret("out", fn=lambda out, call: out.view(call.values["query"].shape),
                       text="(R, N/W, HQ, D): PKB's rows are range-major"),))
