"""Candidates for the compute + communication tasks, judged on 4 CPU ranks: the wrong ones (skipped
communication, the wrong block, an off-by-one rank in a ring, the wrong group) are judged wrong with a
message that says where; one that builds its own process groups inside every call is judged correct.
Verdicts only (verdicts4) but where a test reads the timing: a judge that times also times each task's reference
the first time it judges the task, whatever the candidate's verdict (0.3 s a task here, some 40 tasks)."""
from __future__ import annotations

import re

import pytest

from conftest import VERDICTS, cpu_judge
from pkb_env.record import EvaluationRecord
from pkb_env.task import load_task


def variant(task: str, *edits: tuple[str, str]) -> str:
    """The task's reference with textual edits; each edit must apply (so the test breaks with the reference)."""
    source = load_task(task).reference_source
    for old, new in edits:
        assert old in source, f"{task}'s reference no longer contains {old!r}"
        source = source.replace(old, new)
    return source


def assert_wrong_with_a_location(record: EvaluationRecord) -> None:
    """Wrong, and the first detail names the rank, trial and output, then what is wrong there: the count of
    elements that differ and the first of them, the rows a permutation of the right ones (judge/compare.py), or
    in-place state the call never wrote (judge/verify.py)."""
    assert record.verdict.value == "wrong", record.feedback
    first = record.feedback.splitlines()[1]
    where = re.match(r"rank \d, trial \d( \([^()]*\))?, (output(\[\d+\])?|updated)(\['\w+'\])*: ", first)
    assert where, first
    what = first[where.end():]
    if what.startswith("the rows (dim 0) are a permutation of the expected ones"):
        return
    if "still holds its input value: the call never updated it in place" in what:
        return
    assert re.match(r"\d+/\d+ elements differ \((beyond atol|exact)", what), first
    assert "first at [" in first and "expected" in first and "got" in first


WRONG_GEMM = {
    "skips the all-reduce": [("    dist.all_reduce(out, op=dist.ReduceOp.SUM)\n", "")],
    "averages instead of summing": [("dist.ReduceOp.SUM", "dist.ReduceOp.AVG")],
    "multiplies by the next rank's weight block": [(
        "    out = A @ B\n",
        "    w, r = dist.get_world_size(), dist.get_rank()\n"
        "    peer = torch.empty_like(B)\n"
        "    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, B, (r - 1) % w),\n"
        "                                   dist.P2POp(dist.irecv, peer, (r + 1) % w)])\n"
        "    [q.wait() for q in reqs]\n"
        "    out = A @ peer\n")],
}

WRONG_LINEAR_ATTENTION = {
    "gated_deltanet_cp": {
        "runs its own block from a zero state (no all-to-all)": [
            ("    heads = a_log.shape[0] // world\n    mine = slice(rank * heads, (rank + 1) * heads)\n",
             "    mine = slice(None)\n"),
            ("    q, k, v, gate, beta = (_all_to_all(x, group, scatter_dim=2, gather_dim=1) for x in (q, k, v, gate, "
             "beta))\n", ""),
            ("    return _all_to_all(out.to(v.dtype), group, scatter_dim=1, gather_dim=2)",
             "    return out.to(v.dtype)")],
        "decays its heads with the next rank's parameters": [
            ("mine = slice(rank * heads, (rank + 1) * heads)",
             "mine = slice((rank + 1) % world * heads, ((rank + 1) % world + 1) * heads)")],
    },
    "kimi_delta_attention_cp_tp": {
        "starts every block from a zero state (skips the fold)": [
            ("pairs.view((cp,) + mine_pair.shape)[:cp_rank]", "pairs.view((cp,) + mine_pair.shape)[:0]")],
        "folds its own block into its entering state (off by one)": [
            ("pairs.view((cp,) + mine_pair.shape)[:cp_rank]", "pairs.view((cp,) + mine_pair.shape)[:cp_rank + 1]")],
    },
    "magi1_cso_async_attention": {
        "hard-codes PKB's key ranges (each range its own chunk)": [
            ("        start, end = bounds[r]\n",
             "        start, end = r * world * tokens, (r + 1) * world * tokens\n")],
    },
}


@pytest.mark.parametrize("task,name", [(t, n) for t, wrongs in WRONG_LINEAR_ATTENTION.items() for n in wrongs])
def test_wrong_linear_and_async_attention_is_judged_wrong(verdicts4, task, name):
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *WRONG_LINEAR_ATTENTION[task][name])))


WRONG_RING = {
    "off-by-one rank in the ring": [("source = (me - step) % cp", "source = (me - step - 1) % cp")],
    "skips the tensor-parallel all-reduce": [("    dist.all_reduce(result, group=tp_group)\n", "")],
    "all-reduces over every rank instead of the tp group": [("dist.all_reduce(result, group=tp_group)",
                                                             "dist.all_reduce(result)")],
    "ignores the causal mask across blocks": [("if not causal or source <= me:", "if True:")],
}


# Tensor-parallel GEMMs and norms (PKB 9-20, 45, 46): (task, edits) per wrong candidate.
WRONG_TENSOR_PARALLEL = {
    "all-gather GEMM: blocks concatenated in reverse rank order": (
        "allgather_gemm", [("torch.cat(blocks, dim=1)", "torch.cat(blocks[::-1], dim=1)")]),
    "GEMM reduce-scatter: keeps the next rank's row block": (
        "gemm_reducescatter", [(
            "    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)\n",
            "    dist.all_reduce(partial)\n"
            "    w, r = dist.get_world_size(), dist.get_rank()\n"
            "    out = partial.chunk(w)[(r + 1) % w].clone()\n")]),
    "TP RMSNorm: statistics of the local columns only (skips the all-reduce)": (
        "tp_rms_norm", [("    dist.all_reduce(sum_sq, op=dist.ReduceOp.SUM)\n", "")]),
    "MLP block: keeps its own partial rows instead of reduce-scattering them": (
        "sequence_parallel_mlp", [("dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)",
                                   "out.copy_(partial.chunk(world)[dist.get_rank()])")]),
    "embedding lookup: rows left grouped by owner rank (PKB's order)": (
        "sharded_embedding_lookup", [("    out = torch.empty_like(grouped)\n    out[order] = grouped\n"
                                      "    return out\n", "    return grouped\n")]),
    "RoPE all-gather: the keys' gather sends the queries": (
        "rope_allgather", [("dist.all_gather(k_blocks, k_rot.contiguous())",
                            "dist.all_gather(k_blocks, q_rot.contiguous())")]),
    "FP8 quantize: scales for int8's range (127) instead of float8_e4m3fn's (448)": (
        "blocked_fp8_quantize", [("amax(dim=-1) / 448.0", "amax(dim=-1) / 127.0")]),
    "FP8 dequantize: skips the all-to-all (returns its own chunks)": (
        "blocked_fp8_dequantize", [("    out = torch.empty_like(x)\n    dist.all_to_all_single(out, x)\n"
                                    "    return out\n", "    return x\n")]),
}


@pytest.mark.parametrize("name", WRONG_TENSOR_PARALLEL)
def test_wrong_tensor_parallel_candidates_are_judged_wrong(verdicts4, name):
    task, edits = WRONG_TENSOR_PARALLEL[name]
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *edits)))


WRONG_CONTEXT = {
    ("ring_attention", "passes the ring the wrong way"): [
        ("nxt, prv = dist.get_global_rank(group, (me + 1) % world), dist.get_global_rank(group, (me - 1) % world)",
         "prv, nxt = dist.get_global_rank(group, (me + 1) % world), dist.get_global_rank(group, (me - 1) % world)")],
    ("ring_attention", "attends to the first two blocks only"): [
        ("    for step in range(world):\n", "    for step in range(min(world, 2)):\n")],
    ("ring_attention_pp", "hands the next stage its input instead of its output"): [
        ("dist.send(out.cpu() if host_only else out,", "dist.send(h.cpu() if host_only else h,")],
    ("ring_attention_backward_dp", "skips the data-parallel all-reduce"): [
        ("        dist.all_reduce(g, group=dp_group)\n", "")],
    ("ring_attention_backward_dp", "averages over the cp group instead of dp"): [
        ("dist.all_reduce(g, group=dp_group)", "dist.all_reduce(g, group=cp_group)")],
}


WRONG_ULYSSES = {
    ("ulysses_gather_seq_scatter_heads", "lays the sequence blocks out in reverse rank order"): [
        ("for block in recv.chunk(world)]", "for block in reversed(recv.chunk(world))]")],
    ("ulysses_gather_heads_scatter_seq", "returns the sequence block of the next rank"): [
        ("    send = x.movedim(seq_dim, 0).contiguous()",
         "    send = x.movedim(seq_dim, 0).roll(-x.shape[seq_dim] // world, 0).contiguous()")],
    ("ulysses_all_gather_variable", "concatenates the ranks' blocks in reverse order"): [
        ("return torch.cat(parts)", "return torch.cat(parts[::-1])")],
    ("ulysses_attention", "attends over its own positions only (skips the first all-to-all)"): [
        ("    dist.all_to_all_single(recv, send, group=group)  # block s: rank s's positions of my heads\n"
         "    q, k, v = torch.cat(recv.chunk(world), dim=2)",
         "    q, k, v = torch.cat([send.chunk(world)[dist.get_rank(group)]] * world, dim=2)")],
}


@pytest.mark.parametrize("task,name", WRONG_ULYSSES)
def test_wrong_ulysses_layouts_are_judged_wrong(verdicts4, task, name):
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *WRONG_ULYSSES[task, name])))


WRONG_VOCAB = {
    "vocab_parallel_cross_entropy": {
        "skips the all-reduce of the target's logit": [
            ("    dist.all_reduce(predicted, op=dist.ReduceOp.SUM, group=group)\n", "")],
        "takes the next rank's vocabulary block": [(
            "    start = rank * local_vocab\n",
            "    start = (rank + 1) % dist.get_world_size(group) * local_vocab\n")],
        "shifts by its own maximum (skips the MAX all-reduce)": [
            ("    dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)\n", "")],
    },
    "vocab_parallel_log_prob_topk": {
        "picks the next rank's block of targets": [(
            "target.reshape(tokens)[rank * mine:(rank + 1) * mine]",
            "target.reshape(tokens).roll(-mine)[rank * mine:(rank + 1) * mine]")],
        "skips the nucleus (top-k only)": [("    if top_p is not None and top_p < 1.0:", "    if False:")],
    },
    "vocab_parallel_log_prob_topk_chunked_backward": {
        "takes probabilities over the unfiltered logits": [("grad = -filtered.softmax(dim=-1)",
                                                            "grad = -rows.float().softmax(dim=-1)")],
    },
}


@pytest.mark.parametrize("task,name", [(t, n) for t, wrongs in WRONG_VOCAB.items() for n in wrongs])
def test_wrong_vocab_parallel_candidates_are_judged_wrong(verdicts4, task, name):
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *WRONG_VOCAB[task][name])))


# Training systems (PKB 21-25, 30, 43, 44, 52, 53, 58): (task, edits) per wrong candidate.
WRONG_TRAINING = {
    "quantised all-reduce: sums the int8 codes without their scales": (
        "quantized_grad_allreduce", [("total = (codes.float() * scale).flatten()", "total = codes.float().flatten()")]),
    "quantised all-reduce: averages the raw gradients (skips the quantisation)": (
        "quantized_grad_allreduce", [("total = (codes.float() * scale).flatten()", "total = blocks.flatten().clone()")]),
    "FP8 reduce-scatter: skips the amax history update (scales by the old history)": (
        "fp8_reduce_scatter_grads", [("    history = amax_history.roll(-1)\n    history[-1] = flat_grads.abs().max()\n",
                                      "    history = amax_history.clone()\n")]),
    "FP8 all-gather: dequantises every block with its own scale (skips gathering the scales)": (
        "fp8_allgather_params", [("* all_scales.unsqueeze(1)", "* scale")]),
    "sharded Adam: forgets the bias correction": (
        "fused_adam_grad_unshard_allgather", [("m_hat = m / (1 - beta1 ** step)", "m_hat = m"),
                                              ("v_hat = v / (1 - beta2 ** step)", "v_hat = v")]),
    "sharded Adam: all-gathers the shard before its update": (
        "fused_adam_grad_unshard_allgather", [("dist.all_gather_into_tensor(gathered, updated)",
                                               "dist.all_gather_into_tensor(gathered, master_shard)")]),
    "load-balancing loss: returns the local loss (skips the all-reduce)": (
        "load_balancing_loss", [("    dist.all_reduce(loss)\n    return loss / dist.get_world_size()\n",
                                 "    return loss\n")]),
    "load-balancing loss: breaks top-k ties toward the higher expert index": (
        "load_balancing_loss", [("logits.sort(dim=-1, descending=True, stable=True).indices[:, :top_k]",
                                 "logits.flip(-1).sort(dim=-1, descending=True, stable=True).indices[:, :top_k]"),
                                ("torch.bincount(chosen.flatten()", "torch.bincount(num_experts - 1 - chosen.flatten()")]),
    "clip-grad-norm: the norm of the local shard only (skips the all-reduce)": (
        "clip_grad_norm_no_ep", [("    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=fsdp_group)\n", "")]),
    "EP clip-grad-norm: sums the expert part over the EP group only (skips the EP-FSDP all-reduce)": (
        "clip_grad_norm_ep", [("    dist.all_reduce(ep_total, op=dist.ReduceOp.SUM, group=ep_fsdp_group)\n", "")]),
    "gradient-accumulation loss: normalised by the local count instead of the global one": (
        "grad_acc_loss", [("normalized_loss = weighted / global_valid_tokens",
                           "normalized_loss = weighted / local_valid_tokens")]),
    "SigLIP loss: skips the one-way last ring step at even W (the opposite rank's texts never seen)": (
        "openclip_contrastive_loss", [("bidirectional, one_way = divmod(world - 1, 2)",
                                       "bidirectional, one_way = (world - 1) // 2, 0")]),
    "SigLIP loss: takes the diagonal of every rank's text block as positive pairs": (
        "openclip_contrastive_loss", [("at_hand = [(block, False) for block in received]",
                                       "at_hand = [(block, True) for block in received]")]),
    "policy loss: normalised by the local count of valid tokens (skips its all-reduce)": (
        "importance_sampling_loss", [("    dist.all_reduce(n, op=dist.ReduceOp.SUM)\n", "")]),
    "policy loss: the ratio's minimum and maximum taken locally": (
        "importance_sampling_loss", [("    dist.all_reduce(ratio_min, op=dist.ReduceOp.MIN)\n", ""),
                                     ("    dist.all_reduce(ratio_max, op=dist.ReduceOp.MAX)\n", "")]),
    "LoRA gradient reduction: leaves the down projection's B gradient unreduced": (
        "moe_epgroupgemm_lora_backward", [("    dist.all_reduce(grad_fc2_lora_B, op=dist.ReduceOp.SUM, group=group)\n",
                                           "")]),
}


@pytest.mark.parametrize("name", WRONG_TRAINING)
def test_wrong_training_systems_candidates_are_judged_wrong(verdicts4, name):
    task, edits = WRONG_TRAINING[name]
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *edits)))


# Training steps with state updated in place (PKB 40-42, 47, 48): (task, edits, where the feedback must point).
WRONG_STEPS = {
    "ZeRO-1: updates the next rank's shard of the parameters with its own moments": (
        "zero1_optimizer_shard",
        [("w = torch.cat([p.reshape(-1) for p in (W1, b1, W2, b2)])[rank * part:(rank + 1) * part]",
          "w = torch.cat([p.reshape(-1) for p in (W1, b1, W2, b2)]).roll(-part)[rank * part:(rank + 1) * part]")],
        "updated['"),
    "ZeRO-1: averages the gradients over its own rows only (skips the all-reduce)": (
        "zero1_optimizer_shard", [("    dist.all_reduce(grad)\n", "")], "output: "),
    "ZeRO-2: forgets Adam's bias correction": (
        "zero2_optimizer_shard_grad",
        [("m_hat = exp_avg_part / (1 - beta1 ** step)", "m_hat = exp_avg_part"),
         ("v_hat = exp_avg_sq_part / (1 - beta2 ** step)", "v_hat = exp_avg_sq_part")],
        "updated['"),
    "DDP: steps on its own rows' gradient (skips the all-reduce)": (
        "ddp", [("    dist.all_reduce(grad)\n", "")], "updated['"),
    "FSDP: updates its shard with its own rows' gradient (a local slice, no reduce-scatter)": (
        "fsdp_step_e2e", [("    dist.reduce_scatter_tensor(g, torch.cat([p.grad.reshape(-1) for p in leaves]))\n",
                           "    g.copy_(torch.cat([p.grad.reshape(-1) for p in leaves]).view(world, -1)"
                           "[dist.get_rank()] * world)\n")],
        "updated['"),
    "FSDP x TP: sums the partial outputs over the FSDP group instead of the TP group": (
        "fsdp_and_tp", [("dist.all_reduce(y, group=tp_group)", "dist.all_reduce(y, group=fsdp_group)")], "output: "),
}


@pytest.mark.parametrize("name", WRONG_STEPS)
def test_wrong_training_steps_are_judged_wrong_where(verdicts4, name):
    task, edits, where = WRONG_STEPS[name]
    record = verdicts4.judge(task, variant(task, *edits))
    assert record.verdict.value == "wrong", record.feedback
    first = record.feedback.splitlines()[1]
    assert re.match(r"rank \d, trial \d( \([^()]*\))?, ", first) and where in first, first
    assert "elements differ" in first and "first at [" in first, first


@pytest.fixture(scope="module")
def muon_bf16():
    with cpu_judge(2, VERDICTS.replace(dtype="bfloat16")) as judge:
        judge.open("tp_muon_orthogonalization")
        yield judge


def test_muon_iterating_in_bf16_is_correct_and_a_local_gram_is_wrong(muon_bf16):
    """The Muon tolerance admits Newton-Schulz in bf16 (as Muon runs it: x's dtype throughout), and still
    rejects a Gram of the rank's own columns only."""
    in_bf16 = variant("tp_muon_orthogonalization", ("    work = x.float()\n", "    work = x.clone()\n"))
    record = muon_bf16.judge("tp_muon_orthogonalization", in_bf16)
    assert record.correct, record.feedback
    local = variant("tp_muon_orthogonalization", ("        dist.all_reduce(gram, group=group)\n", ""))
    assert_wrong_with_a_location(muon_bf16.judge("tp_muon_orthogonalization", local))


@pytest.mark.parametrize("name", WRONG_GEMM)
def test_wrong_gemm_allreduce_is_judged_wrong(verdicts4, name):
    assert_wrong_with_a_location(verdicts4.judge("gemm_allreduce", variant("gemm_allreduce", *WRONG_GEMM[name])))


@pytest.mark.parametrize("name", WRONG_RING)
def test_wrong_ring_attention_is_judged_wrong(verdicts4, name):
    assert_wrong_with_a_location(verdicts4.judge("ring_attention_tp", variant("ring_attention_tp", *WRONG_RING[name])))


@pytest.mark.parametrize("task,name", WRONG_CONTEXT)
def test_wrong_context_parallel_attention_is_judged_wrong(verdicts4, task, name):
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *WRONG_CONTEXT[task, name])))


def test_a_candidate_that_builds_its_own_groups_in_every_call_is_correct(judge4):
    """The judge passes groups in, but a candidate may ignore them and make its own, even inside the call
    (every rank creates every group in the same order, as torch requires)."""
    source = variant("ring_attention_tp", (
        "    tp, cp = dist.get_world_size(tp_group), dist.get_world_size(cp_group)\n",
        "    world, rank = dist.get_world_size(), dist.get_rank()\n"
        "    tp_groups = [dist.new_group([2 * c, 2 * c + 1]) for c in range(world // 2)]\n"
        "    cp_groups = [dist.new_group(list(range(t, world, 2))) for t in range(2)]\n"
        "    tp_group, cp_group = tp_groups[rank // 2], cp_groups[rank % 2]\n"
        "    tp, cp = dist.get_world_size(tp_group), dist.get_world_size(cp_group)\n"))
    record = judge4.judge("ring_attention_tp", source)
    assert record.correct, record.feedback
    timing = record.timing  # timed like any candidate: at least the protocol's bursts, a call or more each
    assert timing.bursts >= 3 and timing.calls >= timing.bursts


# Halo exchanges, sharded convolutions, Sinkhorn-Knopp and a GNN feature exchange (PKB 65, 71, 76, 80, 87):
# the halo's rows, width and side, the reductions the partial results need, and the exchange's chunk order.
WRONG_SPATIAL = {
    "conv2d_halo_exchange": {
        "forgets the boundary (zero rows instead of the neighbours')": [
            ("            halo[side] = incoming\n", "")],
        "attaches each neighbour's rows on the wrong side": [
            ("halo[side] = incoming", "halo[\"below\" if side == \"above\" else \"above\"] = incoming")],
        "a halo of the wrong width (two rows sent, the farther one attached)": [
            ("x[:, :, :padding]), (\"below\", me + 1, x[:, :, -padding:])",
             "x[:, :, :padding + 1]), (\"below\", me + 1, x[:, :, -padding - 1:])"),
            ("halo[side] = incoming", "halo[side] = incoming[:, :, :padding]")],
    },
    "hyena_conv1d_boundary_exchange": {
        "forgets the boundary (no halo from the neighbours)": [
            ("            if tail is first:\n                before_first = incoming\n"
             "            else:\n                before_second = incoming\n", "")],
        "takes the second chunk's halo from the previous rank instead of the next": [
            ("(second, me - 1, me + 1)", "(second, me + 1, me - 1)")],
        "a halo of the wrong width (K-2 positions after a zero)": [
            ("outgoing = tail[..., -width:].contiguous()",
             "outgoing = F.pad(tail[..., -width + 1:], (1, 0)).contiguous()")],
    },
    "opensora_conv3d_allreduce": {
        "skips the all-reduce (its own channels' partial only)": [
            ("    dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)\n", "")],
        "adds the bias before the all-reduce (W times over)": [
            ("F.conv3d(x, weight, None,", "F.conv3d(x, weight, bias,"),
            ("    return out + bias.view(1, -1, 1, 1, 1)", "    return out")],
    },
    "dinov2_sinkhorn_knopp": {
        "skips the all-reduce of the column sums (its own samples only)": [
            ("        dist.all_reduce(per_prototype, group=group)\n", "")],
        "one iteration too few": [("range(n_iterations)", "range(n_iterations - 1)")],
    },
    "gnn_feature_exchange_all2all": {
        "a plain all-to-all (chunks not rotated by the rank)": [
            ("torch.cat([chunks[(j - me) % world] for j in range(world)])", "torch.cat(chunks)"),
            ("    return torch.cat([arrived[(me + i) % world] for i in range(world)])", "    return incoming")],
        "skips the index gather (right only for PKB's identity ids)": [
            ("local_features[seed_inverse_ids].chunk(world)", "local_features.chunk(world)")],
    },
}


# Distributed FFTs, a Kalman filter step, a Hyena long convolution, a spherical convolution and a tiled VAE
# decode (PKB 59, 60, 62, 63, 72, 78): the transpose's axes, both parts of a spectrum, the normalisation, the
# mirrored half, float64, the fade's direction, the tile order.
WRONG_SCIENCE = {
    "physicsnemo_distributed_rfft": {
        "an FFT transpose that swaps the wrong axes (column blocks interleaved)": [
            ("recv.permute(1, 2, 0, 3)", "recv.permute(1, 2, 3, 0)")],
        "a spectrum missing its imaginary part (PKB compares the real part only)": [
            ("    return spectrum[..., : world * cols // 2 + 1].contiguous()",
             "    return torch.complex(spectrum.real, torch.zeros_like(spectrum.real))[..., : world * cols // 2 + 1]")],
    },
    "physicsnemo_distributed_irfft": {
        "the wrong normalisation (the row inverse unscaled, 'forward')": [
            ("torch.fft.ifft(field, dim=2, norm=norm)", "torch.fft.ifft(field, dim=2, norm=\"forward\")")],
        "the mirrored half of the spectrum left out (frequencies 1..X/2-1 not doubled)": [
            ("    twice[0] = twice[-1] = 1.0", "    twice[:] = 1.0")],
    },
    "deepmd_kalman_filter_optimizer": {
        "a Kalman update in float32": [
            ("    world = dist.get_world_size(group)\n",
             "    world = dist.get_world_size(group)\n    H, weights, P = H.float(), weights.float(), P.float()\n"),
            ("    return everyone, covariance, next_lambda", "    return everyone.double(), covariance.double(), next_lambda")],
        "skips the all-reduce (a from its own blocks only)": [
            ("    dist.all_reduce(total, group=group)\n", "")],
    },
    "hyena_forward_cp": {
        "forgets the zigzag order (each rank's two chunks taken as adjacent)": [
            ("ordered = torch.cat([chunks[:, :, :, 0], chunks.flip(0)[:, :, :, 1]])",
             "ordered = chunks.permute(0, 3, 1, 2, 4).reshape(2 * world, batch, channels // world, local // 2)")],
        "a circular convolution (an FFT of length S: the sequence's end wraps onto its start)": [
            ("n=2 * length", "n=length")],
    },
    "torchharmonics_spherical_convolution": {
        "rotates the input the wrong way": [(".roll(-1, dims=1)", ".roll(1, dims=1)")],
        "skips the polar all-reduce (its own latitudes' partial sums only)": [
            ("    dist.all_reduce(y, group=polar_group)", "    pass")],
    },
    "magi1_tile_parallel_vae_decode": {
        "fades the wrong way (the ramp reversed)": [
            ("* (1 - ramp) + head * ramp)", "* ramp + head * (1 - ramp))")],
        "takes each decoded tile from the wrong slot (rank-major, not round-robin)": [
            ("gathered[owner * slots + slot]", "gathered[index]")],
    },
}


@pytest.mark.parametrize("task,name", [(t, n) for t, wrongs in WRONG_SCIENCE.items() for n in wrongs])
def test_wrong_science_candidates_are_judged_wrong(verdicts4, task, name):
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *WRONG_SCIENCE[task][name])))


@pytest.mark.parametrize("task,name", [(t, n) for t, wrongs in WRONG_SPATIAL.items() for n in wrongs])
def test_wrong_halo_exchanges_and_sharded_convolutions_are_judged_wrong(verdicts4, task, name):
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *WRONG_SPATIAL[task][name])))


# Science and systems beyond LLMs (PKB 79, 81, 85, 61): exact balance of a sort's slices, a kNN's stated tie
# rule, the IoU comparison of a suppression (its edge case puts pairs at IoU exactly 0.7), a splatting exchange's
# global ids.
WRONG_SORT_KNN_NMS = {
    "distributed_sample_sort": {
        "globally sorted but unbalanced (each rank returns its splitter bucket)": [
            ("    sizes = torch.empty(world, dtype=torch.int64, device=device)\n",
             "    return bucket\n    sizes = torch.empty(world, dtype=torch.int64, device=device)\n")],
    },
    "dinov2_distributed_knn": {
        "breaks ties across ranks by the higher rank first": [
            (".view(world, queries_here, max_k).transpose(0, 1)",
             ".view(world, queries_here, max_k).flip(0).transpose(0, 1)")],
    },
    "sam3_allgather_iou_suppression": {
        "suppresses at IoU > threshold instead of >=": [
            ("intersection / union >= iou_threshold", "intersection / union > iou_threshold")],
        "IoU over the sum of the areas (the intersection not subtracted)": [
            ("(area[:, None] + area[None, :] - intersection)", "(area[:, None] + area[None, :])")],
    },
    "gsplat_3d_gaussian_splatting": {
        "global ids offset by the destination rank (gsplat's and PKB's offsets) instead of the source": [
            ("gaussian + me * n", "gaussian + camera * n")],
    },
}


@pytest.mark.parametrize("task,name", [(t, n) for t, wrongs in WRONG_SORT_KNN_NMS.items() for n in wrongs])
def test_wrong_sorts_knn_ties_and_suppressions_are_judged_wrong(verdicts4, task, name):
    """Wrong with the rank, trial (and edge case) and output; an unbalanced sort may instead exceed the output's
    declared bound on some rank, which the rank refuses before the output travels (a runtime error naming it)."""
    record = verdicts4.judge(task, variant(task, *WRONG_SORT_KNN_NMS[task][name]))
    first = record.feedback.splitlines()[1]
    if record.verdict.value == "runtime_error" and task == "distributed_sample_sort":
        assert re.match(r"ranks? [\d, ]+ raised during trials: OutputError: output has shape \[\d+\], beyond its "
                        r"declared bound \[\d+\]", first), first
        return
    assert record.verdict.value == "wrong", record.feedback
    assert re.match(r"rank \d, trial \d( \((?:[^()]|\([^()]*\))*\))?, output(\[\d+\])?: ", first), first


# MoE dispatch and combine (PKB 26-29), on a top-2-of-8 routing drawn per call: routing that drops or duplicates
# (token, expert) pairs. A wrong split changes how many rows a rank receives, so the feedback may name a shape
# instead of elements; either way it says which rank, trial and output.
WRONG_MOE_DISPATCH = {
    "all-to-all primitive: assumes even splits (PKB's equal split lists): the hot ranks drop pairs": (
        "moe_all2all_primitive", [("    send, recv = sizes[:world], sizes[world:]\n",
                                   "    send = recv = [local_tensor.shape[0] // world] * world\n")]),
    "pre-dispatch: sends the pairs in token order (not sorted by expert): tokens miss their experts and "
    "reach others twice": (
        "moe_pre_all2all", [("permuted = hidden_states.index_select(0, permutation)",
                             "permuted = hidden_states.repeat_interleave(expert_mask.shape[1], dim=0)")]),
    "pre-dispatch: regroups every local expert from the first one's chunk (duplicates its tokens, drops the "
    "other's)": (
        "moe_pre_all2all", [("chunks[s * local_experts + expert]", "chunks[s * local_experts]")]),
    "post-combine: overwrites instead of adding (each token keeps one expert's output, its other pick dropped)": (
        "moe_post_all2all", [("combined.index_add_(", "combined.index_copy_(")]),
    "preprocess: counts tokens, not pairs, per destination rank (a token's two picks on one rank counted once)": (
        "moe_token_preprocess", [("input_splits = per_expert.view(world, local_experts).sum(dim=1)",
                                  "input_splits = expert_mask.sum(dim=1).view(world, local_experts, -1)"
                                  ".amax(dim=1).sum(dim=1)")]),
}


@pytest.mark.parametrize("name", WRONG_MOE_DISPATCH)
def test_moe_routing_that_drops_or_duplicates_pairs_is_judged_wrong(verdicts4, name):
    task, edits = WRONG_MOE_DISPATCH[name]
    record = verdicts4.judge(task, variant(task, *edits))
    assert record.verdict.value == "wrong", record.feedback
    first = record.feedback.splitlines()[1]
    assert re.match(r"rank \d, trial \d( \([^()]*\))?, output(\[\d+\])?: (\d+/\d+ elements differ|shape \[)", first), \
        first


# Expert-parallel fused MoE forward (PKB 31, 32, 49, 50): routing that drops or duplicates tokens, a combine
# without the gate weights, experts on the wrong rank, an adapter left out. (task, edits) per wrong candidate.
WRONG_MOE_FUSED = {
    "fused MoE: combines the picks without their gate weights": (
        "fused_moe_fwd", [("back.float() * topk_weights.flatten()[order, None]", "back.float()")]),
    "fused MoE: drops every token's second pick (routes its top-1 only)": (
        "fused_moe_fwd", [("    k = topk_idx.shape[1]\n",
                           "    topk_idx, topk_weights = topk_idx[:, :1], topk_weights[:, :1]\n    k = 1\n")]),
    "MoE, E = W: takes the pairs pick-major (duplicates some tokens, drops others)": (
        "moe_ep_balanced", [("token = order // k", "token = order % len(hidden_states)")]),
    "MoE, E = 2W: places the experts round-robin (expert e on rank e % W)": (
        "moe_ep_wide", [("expert = topk_idx.flatten()",
                         "expert = ((topk_idx % ranks) * local + topk_idx // ranks).flatten()")]),
    "fused MoE with LoRA: leaves out the down projection's adapter": (
        "fused_moe_fwd_lora", [("_lora_linear(F.silu(gate) * up, w_down[j], b_down[j], lora_down_A[j], lora_down_B[j])",
                                "F.linear(F.silu(gate) * up, w_down[j], b_down[j])")]),
}


@pytest.mark.parametrize("name", WRONG_MOE_FUSED)
def test_wrong_fused_moe_candidates_are_judged_wrong(verdicts4, name):
    task, edits = WRONG_MOE_FUSED[name]
    assert_wrong_with_a_location(verdicts4.judge(task, variant(task, *edits)))


WRONG_GRAPH = {
    "gnn_feature_exchange_all2all_backward": {
        "sends the gradient rows to the wrong owners (a plain all-to-all, no rotation)": [
            ("torch.cat([chunks[(j - me) % world] for j in range(world)])", "torch.cat(chunks)"),
            ("torch.cat([arrived[(me + i) % world] for i in range(world)])", "incoming")],
        "a scatter that overwrites instead of accumulating": [
            ("grad_local.index_add_(0, seed_inverse_ids, returned)",
             "grad_local.index_copy_(0, seed_inverse_ids, returned)")],
    },
    "gnn_sparse_embedding_all2all": {
        "sends the pairs to the wrong owners (index % W instead of the index's range block)": [
            ("idx // per_rank, group)", "idx % dist.get_world_size(group), group)")],
        "routes the indices but sends the rows unsorted": [("value[order]", "value")],
    },
    "gnn_negative_scoring": {
        "breaks ties the other way (a negative equal to the positive ranks behind it)": [
            ("(neg_score >= pos_score[:, None])", "(neg_score > pos_score[:, None])")],
    },
    "torchrec_kjt_all2all": {
        "skips the recat (returns what arrived source-major)": [
            ('{"lengths": out_lengths, "values": recv_values[order],',
             '{"lengths": recv_lengths, "values": recv_values,')],
        "assumes every rank's batch is its own size (no stride exchange)": [
            ('"stride": peer_meta[:, 0].sum(), "stride_per_rank": peer_meta[:, 0].clone()}',
             '"stride": torch.tensor(batch * world), "stride_per_rank": torch.full_like(peer_meta[:, 0], batch)}')],
    },
    "gnn_neighbor_sampling": {
        "a sampler that only sees the local partition": [
            ("    owner = nodes % world\n", "    owner = torch.full_like(nodes, dist.get_rank(group))\n")],
        "breaks priority ties the other way (the higher edge position first)": [
            ("by_priority = torch.sort(edge_priority, stable=True).indices",
             "by_priority = edge_priority.numel() - 1 - torch.sort(edge_priority.flip(0), stable=True).indices")],
    },
    "gnn_sparse_feature_fetch_projection": {
        "fetches rows from the wrong owners (node % W instead of the node's block)": [
            ("owner = node_ids // shard.shape[0]", "owner = node_ids % world"),
            ("shard[requests - dist.get_rank(group) * shard.shape[0]]", "shard[requests // world]")],
    },
}


def assert_wrong_at(record: EvaluationRecord, where: str) -> None:
    """Judged wrong, the first failure naming a rank, a trial and the output `where` points at."""
    assert record.verdict.value == "wrong", record.feedback
    first = record.feedback.splitlines()[1]
    assert re.match(r"rank \d, trial \d( \([^()]*\))?, " + re.escape(where), first), first


@pytest.mark.parametrize("task,name", [(t, n) for t, wrongs in WRONG_GRAPH.items() for n in wrongs])
def test_wrong_graph_exchanges_are_judged_wrong(verdicts4, task, name):
    record = verdicts4.judge(task, variant(task, *WRONG_GRAPH[task][name]))
    assert_wrong_at(record, "output")
