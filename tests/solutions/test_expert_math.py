"""The math of the GPU experts for the fused tasks, on CPU tensors, against each task's golden and tolerance.

The experts in solutions/experts/ for allgather_gemm, gemm_reducescatter and ring_attention are torch code
around symmetric-memory copies: each module exposes the arithmetic its `solution` runs (the order of the
split-K terms, the row chunks, the blocks a causal rank needs and their log-sum-exp merge), and here that
arithmetic runs on every rank's inputs, with the data a rank would have pulled from its peers handed to it
directly. tp_rms_norm, vocab_parallel_cross_entropy and quantized_grad_allreduce are single CUDA kernels;
here a torch model of each kernel's arithmetic (per-lane sequential accumulation in the kernel's types, the
warp's butterfly, the cross-rank combine; for the quantised all-reduce the task's exact codes and the rank-order
fp32 sum of fused multiply-adds) checks that its precision design passes the task's tolerance. What is NOT
verified on CPU: the data movement (symmetric buffers, copies, barriers, streams), which the GPU tests
(tests/gpu/test_fused_experts.py, tests/gpu/test_experts.py) cover.

Each check also runs a broken variant, which the same comparison must reject: the tolerance is tight
enough to see the mistakes these algorithms could make.
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from pkb_env.contract import Preset, rank_seeds
from pkb_env.judge.compare import compare_outputs, summarize_mismatches
from pkb_env.task import load_task

EXPERTS = Path(__file__).resolve().parents[2] / "solutions" / "experts"
SECRET = 0x0E3E27


def expert(name: str):
    """The expert module solutions/experts/<name>.py, imported as a plain module (it imports torch and
    pkb_env.runtime only, both usable without a GPU)."""
    spec = importlib.util.spec_from_file_location(f"expert_{name}", EXPERTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rank_inputs(task: str, world: int, dtype: str, preset: str | Preset = "tiny", trial: int = 0) -> list[dict]:
    spec = load_task(task)
    out = []
    for r in range(world):
        seeds = rank_seeds(SECRET, spec.layout(world), r, task, dtype, trial)
        args = spec.make_inputs(spec.input_context(r, world, preset, dtype, "cpu", seeds))
        out.append(dict(zip(spec.parameters, args)))
    return out


def mismatches(task: str, world: int, dtype: str, preset: str | Preset, inputs: list[dict], got: list) -> str:
    """'' when every rank's output is within the task's tolerance of the golden, else the judge's summary."""
    spec = load_task(task)
    dims = spec.preset(preset).dims
    expected = spec.golden(inputs, spec.world(dims, world, dtype))
    checks = spec.output_checks(dtype, dims, world)
    found = []
    for r in range(world):
        found += compare_outputs(expected[r], got[r], checks, f"{dtype} W={world}", r)
    return summarize_mismatches(found) if found else ""


# Sizes: tiny (fp32) at several world sizes; bench (bf16, PKB's shapes) at W=2; for the experts that cut
# their work into row chunks, a chunk size small enough that tiny shapes take several chunks.
CASES = [("float32", "tiny", 2), ("float32", "tiny", 3), ("float32", "tiny", 4), ("bfloat16", "bench", 2)]


def allowed(task: str, preset: str, world: int) -> bool:
    return load_task(task).world_size_problem(world, preset) is None


# -- all-gather + GEMM ---------------------------------------------------------------------------------

# Both paths of the GEMM experts: the default chunk size keeps these sizes on the small path (one cat or one
# add); a 64-byte chunk sends them down the pipelined path (split-K terms, several row chunks).
PATHS = {"small": None, "pipelined": 64}
# Every size on both paths but PKB's bench size, whose 64-byte chunks (thousands of them) only repeat the tiny
# sizes' pipelined arithmetic at 30 s a case on CPU; at bench the small path is the one the expert takes.
SIZES_AND_PATHS = [(*case, path) for case in CASES for path in PATHS if not (case[1] == "bench" and path == "pipelined")]


@pytest.mark.parametrize("dtype,preset,world,path", SIZES_AND_PATHS)
def test_allgather_gemm_matches_the_golden(dtype, preset, world, path):
    if not allowed("allgather_gemm", preset, world):
        pytest.skip(f"allgather_gemm does not take W={world} at {preset}")
    mod = expert("allgather_gemm")
    mod.CHUNK_BYTES = PATHS[path] or mod.CHUNK_BYTES
    inputs = rank_inputs("allgather_gemm", world, dtype, preset)
    blocks = [args["A"] for args in inputs]
    got = [mod.gemm_of_blocks(blocks, inputs[r]["B"], r, world) for r in range(world)]
    assert not mismatches("allgather_gemm", world, dtype, preset, inputs, got)

    rows, width = blocks[0].shape
    assert (len(mod.row_chunks(rows, width * blocks[0].element_size())) > 1) == (path == "pipelined")
    # a peer's block multiplied by the wrong rows of B (its neighbour's K-block) must be caught
    wrong = [torch.mm(blocks[r], mod.k_block(inputs[r]["B"], r, blocks[r].shape[1])) for r in range(world)]
    for r in range(world):
        for p in mod.peer_order(r, world):
            wrong[r].addmm_(blocks[p], mod.k_block(inputs[r]["B"], (p + 1) % world, blocks[p].shape[1]))
    assert mismatches("allgather_gemm", world, dtype, preset, inputs, wrong)


def test_allgather_gemm_pulls_every_peer_once_in_a_rotated_order():
    mod = expert("allgather_gemm")
    for world in range(1, 9):
        orders = [mod.peer_order(r, world) for r in range(world)]
        assert all(sorted(o + [r]) == list(range(world)) for r, o in enumerate(orders))
        if world > 2:   # at each step the ranks pull from distinct peers
            assert all(len({o[step] for o in orders}) == world for step in range(world - 1))


@pytest.mark.parametrize("rows,row_bytes", [(1024, 512), (8192, 4096), (8192, 16384), (7, 8 << 20), (1, 1 << 30)])
def test_row_chunks_cover_every_row_once(rows, row_bytes):
    for name in ("allgather_gemm", "gemm_reducescatter"):
        mod = expert(name)
        chunks = mod.row_chunks(rows, row_bytes)
        assert chunks[0][0] == 0 and chunks[-1][1] == rows and 1 <= len(chunks) <= mod.MAX_CHUNKS
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(chunks, chunks[1:] + [(rows, rows + 1)]))
        if rows * row_bytes < mod.CHUNK_BYTES:
            assert len(chunks) == 1


def test_large_gemms_are_pulled_in_chunks_of_at_least_chunk_bytes():
    """The `large` presets (W=2): 32 MiB (all-gather) and 64 MiB (reduce-scatter) per peer block, 4 chunks."""
    ag, rs = expert("allgather_gemm"), expert("gemm_reducescatter")
    assert len(ag.row_chunks(8192, 2048 * 2)) == 4 and len(rs.row_chunks(4096, 8192 * 2)) == 4
    assert len(ag.row_chunks(1024, 256 * 2)) == 1 and len(rs.row_chunks(512, 1024 * 2)) == 1


# -- GEMM + reduce-scatter -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,preset,world,path", SIZES_AND_PATHS)
def test_gemm_reducescatter_matches_the_golden(dtype, preset, world, path):
    if not allowed("gemm_reducescatter", preset, world):
        pytest.skip(f"gemm_reducescatter does not take W={world} at {preset}")
    mod = expert("gemm_reducescatter")
    mod.CHUNK_BYTES = PATHS[path] or mod.CHUNK_BYTES
    inputs = rank_inputs("gemm_reducescatter", world, dtype, preset)
    blocks = [(args["A"], args["B"]) for args in inputs]
    got = [mod.gemm_of_blocks(blocks, r, world) for r in range(world)]
    assert not mismatches("gemm_reducescatter", world, dtype, preset, inputs, got)

    rows, n = inputs[0]["A"].shape[0] // world, inputs[0]["B"].shape[1]
    assert (len(mod.row_chunks(rows, n * inputs[0]["B"].element_size())) > 1) == (path == "pipelined")
    # rank r pulling the partial the peer made for the NEXT rank's rows must be caught
    shifted = [mod.gemm_of_blocks(blocks, (r + 1) % world, world) for r in range(world)]
    assert mismatches("gemm_reducescatter", world, dtype, preset, inputs, shifted)


def test_gemm_reducescatter_schedule_pairs_every_puller_with_its_maker():
    """At step k rank r makes the rows of rank r+k+1 and pulls from rank r-k-1, which at that step makes
    exactly rank r's rows: the pairs of every step are a permutation, so every partial is pulled once."""
    mod = expert("gemm_reducescatter")
    for world in range(2, 9):
        for k in range(world - 1):
            made_for = {r: mod.destinations(r, world)[k] for r in range(world)}
            pulled_from = {r: (r - k - 1) % world for r in range(world)}
            assert all(made_for[pulled_from[r]] == r for r in range(world))


# -- ring attention ------------------------------------------------------------------------------------

def ring_attention_outputs(mod, inputs, world, drop_last=False):
    got = []
    for r, args in enumerate(inputs):
        scale = args["softmax_scale"] or 1.0 / math.sqrt(args["q"].shape[-1])
        blocks = [mod.block_attention(args["q"], args["k"], args["v"], scale, args["causal"])]
        needed = mod.sources(r, world, args["causal"])
        for p in needed[:-1] if drop_last else needed:
            blocks.append(mod.block_attention(args["q"], inputs[p]["k"], inputs[p]["v"], scale, False))
        got.append(mod.merge(blocks, args["q"].dtype))
    return got


@pytest.mark.parametrize("dtype,preset,world", CASES + [("bfloat16", "bench", 4), ("float16", "bench", 8)])
def test_ring_attention_blocks_and_merge_match_the_golden(dtype, preset, world):
    if not allowed("ring_attention", preset, world):
        pytest.skip(f"ring_attention does not take W={world} at {preset}")
    mod = expert("ring_attention")
    inputs = rank_inputs("ring_attention", world, dtype, preset)
    got = ring_attention_outputs(mod, inputs, world)
    assert all(g.shape == args["q"].shape and g.dtype == args["q"].dtype and g.is_contiguous()
               for g, args in zip(got, inputs))
    assert not mismatches("ring_attention", world, dtype, preset, inputs, got)
    # a rank that misses the farthest block it needs (rank 0 needs none, so only W > 1 ranks differ)
    assert mismatches("ring_attention", world, dtype, preset, inputs, ring_attention_outputs(mod, inputs, world, True))


def test_ring_attention_without_a_mask_merges_every_block():
    mod = expert("ring_attention")
    inputs = rank_inputs("ring_attention", 3, "float32")
    for args in inputs:
        args["causal"] = False
    got = ring_attention_outputs(mod, inputs, 3)
    q, k, v = (torch.cat([a[n] for a in inputs], dim=1).double() for n in ("q", "k", "v"))
    scores = torch.einsum("bshe,bthe->bhst", q, k) / math.sqrt(q.shape[-1])
    full = torch.einsum("bhst,bthe->bshe", torch.softmax(scores, -1), v).float()
    for r, g in enumerate(got):
        torch.testing.assert_close(g, full.chunk(3, dim=1)[r], atol=1e-5, rtol=1e-5)


def test_ring_attention_sources():
    mod = expert("ring_attention")
    assert [mod.sources(r, 4, True) for r in range(4)] == [[], [0], [1, 0], [2, 1, 0]]
    assert [mod.sources(r, 4, False) for r in range(4)] == [[3, 2, 1], [0, 3, 2], [1, 0, 3], [2, 1, 0]]


# -- tensor-parallel RMSNorm: a model of the kernel's arithmetic -------------------------------------------

def lanes(values: torch.Tensor, pack: int) -> torch.Tensor:
    """(rows, n) -> (rows, steps, 32, pack): what lane l reads at step s, as the kernel's loops assign it
    (16-byte packs when n is a multiple of the pack, else single elements); zeros past the row's end."""
    rows, n = values.shape
    pack = pack if n % pack == 0 else 1
    packs = values.reshape(rows, n // pack, pack)
    steps = -(-packs.shape[1] // 32)
    padded = packs.new_zeros(rows, steps * 32, pack)
    padded[:, :packs.shape[1]] = packs
    return padded.reshape(rows, steps, 32, pack)


def butterfly(per_lane: torch.Tensor, combine) -> torch.Tensor:
    """The warp's xor-shuffle reduction over the last axis (32 lanes); every lane ends with the result."""
    index = torch.arange(32)
    for offset in (16, 8, 4, 2, 1):
        per_lane = combine(per_lane, per_lane[..., index ^ offset])
    return per_lane[..., 0]


def rms_norm_kernel_model(xs: list[torch.Tensor], ws: list[torch.Tensor], eps: float) -> list[torch.Tensor]:
    acc = torch.float64 if xs[0].dtype == torch.float32 else torch.float32
    pack = 16 // xs[0].element_size()
    sums = []
    for x in xs:
        read = lanes(x.to(acc), pack)
        running = torch.zeros(read.shape[0], 32, dtype=acc)
        for step in range(read.shape[1]):          # each lane adds its packs in order, element by element
            for j in range(read.shape[3]):
                running = running + read[:, step, :, j] * read[:, step, :, j]
        sums.append(butterfly(running, torch.add).double())
    total = torch.stack(sums).sum(0)               # the ranks' sums, in float64
    count = xs[0].shape[-1] * len(xs)
    inv = (1.0 / torch.sqrt(total / count + eps)).to(acc)
    return [(x.to(acc) * inv[:, None] * w.to(acc)).to(x.dtype) for x, w in zip(xs, ws)]


@pytest.mark.parametrize("dtype,preset,world", CASES)
def test_tp_rms_norm_kernel_arithmetic_is_within_tolerance(dtype, preset, world):
    if not allowed("tp_rms_norm", preset, world):
        pytest.skip(f"tp_rms_norm does not take W={world} at {preset}")
    inputs = rank_inputs("tp_rms_norm", world, dtype, preset)
    xs, ws = [a["hidden_states"] for a in inputs], [a["weight"] for a in inputs]
    got = rms_norm_kernel_model(xs, ws, inputs[0]["eps"])
    assert not mismatches("tp_rms_norm", world, dtype, preset, inputs, got)
    # a kernel that took the mean over its own columns only (count n, not n * W) scales by 1/sqrt(W): caught
    wrong = [g * math.sqrt(world) ** -1 for g in got]
    assert mismatches("tp_rms_norm", world, dtype, preset, inputs, wrong)


def test_tp_rms_norm_grid_fits_the_signal_pad_and_the_sms():
    mod = expert("tp_rms_norm")
    for rows in (1, 16, 1024, 16384, 10 ** 6):
        for world in (1, 2, 4, 8):
            blocks = mod.grid_blocks(rows, 132, world)
            assert 1 <= blocks <= 132 and blocks * world <= mod.MAX_PAD_FLAGS
            assert blocks * (mod.THREADS // 32) >= min(rows, 132 * (mod.THREADS // 32))


# -- vocab-parallel cross entropy: a model of the kernel's arithmetic -------------------------------------

def lse_merge(m, s, m2, s2):
    top = torch.maximum(m, m2)
    empty = top == -math.inf
    safe = torch.where(empty, torch.zeros_like(top), top)
    merged = s * torch.exp(m - safe) + s2 * torch.exp(m2 - safe)
    return top, torch.where(empty, torch.zeros_like(merged), merged)


def vocab_ce_kernel_model(logits: list[torch.Tensor], target: torch.Tensor) -> list[torch.Tensor]:
    n = logits[0].shape[-1]
    pack = 16 // logits[0].element_size()
    ids = target.reshape(-1)
    stats = []
    for rank, x in enumerate(logits):
        rows = x.reshape(-1, n).float()
        read = lanes(rows, pack)
        real = lanes(torch.ones_like(rows, dtype=torch.bool), pack)   # padding lanes read nothing
        read = read.masked_fill(~real, -math.inf)
        m = torch.full((rows.shape[0], 32), -math.inf)
        s = torch.zeros(rows.shape[0], 32)
        for step in range(read.shape[1]):          # online update per lane: the pack's max, then its exps
            top = read[:, step].amax(-1)
            grow = top > m
            s = torch.where(grow, s * torch.exp(m - torch.where(grow, top, m)), s)
            m = torch.where(grow, top, m)
            for j in range(read.shape[3]):
                s = s + torch.where(m == -math.inf, torch.zeros_like(s), torch.exp(read[:, step, :, j] - m))
        index = torch.arange(32)
        for offset in (16, 8, 4, 2, 1):
            m, s = lse_merge(m, s, m[:, index ^ offset], s[:, index ^ offset])
        local = ids - rank * n
        mine = (local >= 0) & (local < n)
        t = torch.where(mine, rows.gather(1, local.clamp(0, n - 1)[:, None])[:, 0], torch.zeros(len(ids)))
        stats.append((m[:, 0].double(), s[:, 0].double(), t.double()))
    big = torch.stack([m for m, _, _ in stats]).amax(0)
    total = sum(s * torch.exp(m - big) for m, s, _ in stats)
    loss = (torch.log(total) + big - sum(t for _, _, t in stats)).float().reshape(target.shape)
    return [loss.clone() for _ in logits]


LONG_VOCAB = Preset({"B": 1, "S": 3, "V": 128256}, "bfloat16", "Llama-3's vocabulary, a few tokens")


@pytest.mark.parametrize("dtype,preset,world", CASES + [("bfloat16", LONG_VOCAB, 2), ("float32", LONG_VOCAB, 8)],
                         ids=lambda v: v.note.split(",")[0] if isinstance(v, Preset) else str(v))
def test_vocab_ce_kernel_arithmetic_is_within_tolerance(dtype, preset, world):
    task = "vocab_parallel_cross_entropy"
    if isinstance(preset, str) and not allowed(task, preset, world):
        pytest.skip(f"{task} does not take W={world} at {preset}")
    inputs = rank_inputs(task, world, dtype, preset)
    got = vocab_ce_kernel_model([a["vocab_parallel_logits"] for a in inputs], inputs[0]["target"])
    assert not mismatches(task, world, dtype, preset, inputs, got)
    # the target's logit read from the neighbouring rank's vocabulary block must be caught
    shifted = vocab_ce_kernel_model([a["vocab_parallel_logits"] for a in inputs[1:] + inputs[:1]], inputs[0]["target"])
    assert mismatches(task, world, dtype, preset, inputs, shifted)


def test_vocab_ce_grid_fits_the_signal_pad_and_the_sms():
    mod = expert("vocab_parallel_cross_entropy")
    for rows in (1, 8192, 16384):
        for world in (1, 2, 8):
            blocks = mod.grid_blocks(rows, 132, world)
            assert 1 <= blocks <= 132 and blocks * world <= mod.MAX_PAD_FLAGS


# -- quantised gradient all-reduce: a model of the kernel's arithmetic ------------------------------------

def quantized_allreduce_kernel_model(grads: list[torch.Tensor], drop_quantisation: bool = False) -> list[torch.Tensor]:
    """The kernel's arithmetic: each rank's codes and scales in fp32 (IEEE division, round half to even, as
    torch computes them on CPU), then sum_r q_r * s_r in rank order with fused multiply-adds (the exact
    product added to the fp32 running sum, rounded once), an fp32 division by W and one rounding to the
    dtype. The same bits on every rank."""
    acc = torch.zeros(grads[0].shape, dtype=torch.float32)
    for g in grads:
        blocks = g.float().view(-1, 128)
        if drop_quantisation:
            terms = blocks.double()
        else:
            scale = blocks.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
            codes = (blocks / scale).round().clamp(-127, 127)
            terms = codes.double() * scale.double()          # exact: an 8-bit code times a 24-bit scale
        acc = (acc.double() + terms.flatten()).float()      # the fma: one rounding of the exact sum
    mean = (acc / len(grads)).to(grads[0].dtype)
    return [mean.clone() for _ in grads]


FP16_W8 = Preset({"blocks": 64}, "float16", "fp16 at 8 ranks")


@pytest.mark.parametrize("dtype,preset,world", CASES + [("float16", FP16_W8, 8)],
                         ids=lambda v: v.note if isinstance(v, Preset) else str(v))
def test_quantized_allreduce_kernel_arithmetic_is_within_tolerance(dtype, preset, world):
    task = "quantized_grad_allreduce"
    if isinstance(preset, str) and not allowed(task, preset, world):
        pytest.skip(f"{task} does not take W={world} at {preset}")
    inputs = rank_inputs(task, world, dtype, preset)
    grads = [a["flat_grad"] for a in inputs]
    assert not mismatches(task, world, dtype, preset, inputs, quantized_allreduce_kernel_model(grads))
    # averaging the gradients without their quantisation must be caught
    assert mismatches(task, world, dtype, preset, inputs, quantized_allreduce_kernel_model(grads, True))


def test_quantized_allreduce_paths_grid_and_slots():
    mod = expert("quantized_grad_allreduce")
    bench, large = 8192 * 128, 65536 * 128
    # two-shot where it moves clearly fewer bytes: 16-bit from W = 3 (at these sizes), fp32 only at W = 8
    assert not mod.two_shot(bench, 2, 2) and mod.two_shot(bench, 2, 4) and mod.two_shot(large, 2, 8)
    assert not mod.two_shot(bench, 4, 4) and mod.two_shot(bench, 4, 8)
    assert not mod.two_shot(16 * 128, 4, 8), "tiny messages stay one-shot"
    for blocks in (1, 16, 8192, 65536, 10 ** 6):
        for world in (1, 2, 3, 4, 8):
            grid = mod.grid_blocks(blocks, 132, world)
            assert 1 <= grid <= 132 and grid * world <= mod.MAX_PAD_FLAGS
        for elem in (2, 4):   # every region of a slot starts 16-byte aligned (the kernel's packed accesses)
            n = blocks * 128
            assert mod.slot_bytes(n, elem) % 16 == 0 and mod.slot_bytes(n, elem) >= n + 4 * blocks + n * elem


# -- ZeRO-2 step: the expert's backward and a model of its kernel's arithmetic ----------------------------

ZERO2 = "zero2_optimizer_shard_grad"
ZERO2_STATE = ("W1", "b1", "W2", "b2", "exp_avg_part", "exp_avg_sq_part")


def zero2_kernel_model(inputs: list[dict], no_bias_correction: bool = False,
                       summed_not_averaged: bool = False) -> tuple[list, list[dict]]:
    """Every rank's (gradient shard, state after the step): the expert's own `backward_into` on each rank's
    rows (its GEMMs, on CPU), then the kernel's arithmetic: the flat gradients summed in rank order in fp32,
    times 2 / (N O) as a double product rounded once; Adam in float64 from the fp32 state with every state
    rounded once to fp32; rank r's shard updated by rank r, every rank's parameters the owners' bits."""
    mod = expert(ZERO2)
    world, first = len(inputs), inputs[0]
    names = ZERO2_STATE[:4]
    P = sum(first[n].numel() for n in names)
    S = P // world
    flats = []
    for a in inputs:
        flat = torch.full((P,), float("nan"))
        mod.backward_into(flat, a["X"], a["y"], *(a[n] for n in names))
        flats.append(flat)
    rows = first["X"].shape[0] * (1 if summed_not_averaged else world)
    hyper = {k: first[k] for k in ("lr", "beta1", "beta2", "eps", "step")}
    if no_bias_correction:
        hyper["step"] = math.inf   # beta ** step = 0: both corrections 1
    w = torch.cat([first[n].reshape(-1) for n in names])
    g, new, moments = zero2_adam_model(flats, w, [a["exp_avg_part"] for a in inputs],
                                       [a["exp_avg_sq_part"] for a in inputs], 2.0 / (rows * first["W2"].shape[0]),
                                       **hyper)
    sizes = [first[n].numel() for n in names]
    params = [t.reshape(first[n].shape) for n, t in zip(names, new.split(sizes))]
    grads = list(g.split(S))
    updated = [dict(zip(ZERO2_STATE, [p.clone() for p in params] + list(mv))) for mv in moments]
    return grads, updated


def zero2_adam_model(flats, w, ms, vs, grad_scale, lr, beta1, beta2, eps, step):
    """The kernel's arithmetic on every rank's flat gradients `flats` (fp32), the parameters `w` (P fp32,
    every rank's) and each rank's moments: (the averaged gradient (P), the new parameters (P), each rank's
    (m, v)). The gradients summed in rank order in fp32, times grad_scale as a double product rounded once;
    Adam in float64 from the fp32 state (bias corrections 1 - beta^step in float64), each state rounded
    once to fp32; shard r updated by rank r."""
    world, S = len(flats), ms[0].numel()
    acc = flats[0].clone()
    for f in flats[1:]:
        acc += f
    g = (acc.double() * grad_scale).float()
    bc1, bc2 = 1.0 - math.pow(beta1, step), 1.0 - math.pow(beta2, step)
    new = torch.empty_like(w)
    moments = []
    for r in range(world):
        part = slice(r * S, (r + 1) * S)
        gd = g[part].double()
        m = beta1 * ms[r].double() + (1 - beta1) * gd
        v = beta2 * vs[r].double() + (1 - beta2) * gd * gd
        new[part] = (w[part].double() - lr * (m / bc1) / ((v / bc2).sqrt() + eps)).float()
        moments.append((m.float(), v.float()))
    return g, new, moments


def zero2_golden(world: int, dtype: str, preset: str, inputs: list[dict]) -> tuple[list, list[dict]]:
    """The golden's (gradient shards, state after the step), on copies of the inputs."""
    spec = load_task(ZERO2)
    golden_inputs = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in a.items()} for a in inputs]
    expected = spec.golden(golden_inputs, spec.world(spec.preset(preset).dims, world, dtype))  # updates the copies
    return expected, [{n: a[n] for n in ZERO2_STATE} for a in golden_inputs]


def zero2_mismatches(world: int, dtype: str, preset: str, inputs: list[dict], got: tuple[list, list[dict]],
                     golden: tuple[list, list[dict]] | None = None) -> str:
    """'' when every rank's gradient shard and state after the step are within tolerance of the golden's
    (`golden`: zero2_golden's, computed here unless given)."""
    spec = load_task(ZERO2)
    expected, state = golden or zero2_golden(world, dtype, preset, inputs)
    checks = spec.output_checks(dtype, spec.preset(preset).dims, world)
    found = []
    for r in range(world):
        found += compare_outputs(expected[r], got[0][r], checks, f"{dtype} W={world}", r)
        found += compare_outputs(state[r], got[1][r], checks, f"{dtype} W={world}", r, root="updated")
    return summarize_mismatches(found) if found else ""


# W = 8 at tiny: shards of 35 values (not a multiple of a 16-byte pack), parameters split mid-shard
@pytest.mark.parametrize("dtype,preset,world", [("float32", "tiny", 1), ("float32", "tiny", 2), ("float32", "tiny", 4),
                                                ("float16", "tiny", 8), ("bfloat16", "bench", 2)])
def test_zero2_kernel_arithmetic_is_within_tolerance(dtype, preset, world):
    assert allowed(ZERO2, preset, world)
    inputs = rank_inputs(ZERO2, world, dtype, preset)
    golden = zero2_golden(world, dtype, preset, inputs)
    assert not zero2_mismatches(world, dtype, preset, inputs, zero2_kernel_model(inputs), golden)
    # Adam without its bias correction, or the gradients summed over the ranks instead of averaged, is caught
    assert "updated" in zero2_mismatches(world, dtype, preset, inputs, zero2_kernel_model(inputs, no_bias_correction=True),
                                         golden)
    if world > 1:
        assert zero2_mismatches(world, dtype, preset, inputs, zero2_kernel_model(inputs, summed_not_averaged=True),
                                golden)


def test_zero2_grid_and_buffer_layout():
    mod = expert(ZERO2)
    for shard in (1, 35, 65728, 131456, 10 ** 7):
        for world in (1, 2, 4, 8):
            grid = mod.grid_blocks(shard, 132, world)
            assert 1 <= grid <= 132 and grid * world <= mod.MAX_PAD_FLAGS
    for p in (280, 262912, 281):   # the parameter shard starts 16-byte aligned after the P gradients
        assert mod.param_offset(p) % 4 == 0 and p <= mod.param_offset(p) < p + 4
