"""How much of a tolerance the precision choices of fast kernels use, emulated in one process.

The references compute in float32 and round once, so tolerance_margins.py shows how far a careful
algorithm sits from the float64 golden. Fast kernels round intermediates to the task dtype: Muon runs its
Newton-Schulz iterations in bf16, fla's chunk kernels store corrected values, WY factors and chunk states
in bf16, flash attention rounds its probabilities to bf16 before P V. A tolerance must admit those and
still reject wrong answers, so this script emulates each choice on the task's own inputs and golden and
prints max |got - golden| / (atol + rtol |golden|), the measure of tolerance_margins.py: it must stay
well below 1. Where a near miss is cheap to state it is printed too (it must land above 1).

    python benchmarks/tolerance_headroom.py --preset bench --world-size 2 4 8
    python benchmarks/tolerance_headroom.py --task magi1_cso_async_attention --preset tiny --world-size 2 4 8
    python benchmarks/tolerance_headroom.py --task magi1_cso_async_attention --dims N=2048 HQ=16 HKV=8
    python benchmarks/tolerance_headroom.py --task magi1_cso_async_attention --device cuda   # bench's golden

Writes $OUT/tolerance_headroom.json (default ./.out) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

SECRET = 0x4EAD_800


def _rounder(dtype: torch.dtype):
    return lambda x: x.to(dtype).float()


# -- the emulated kernels: each takes the global inputs (as the golden sees them) and the task dtype ------------

def muon_in_dtype(full: dict, dtype: torch.dtype, world: int, steps: int | None = None) -> torch.Tensor:
    """Newton-Schulz as Muon runs it: the norm in fp32, every iteration's products in the dtype, the Gram
    summed over the W column blocks in the dtype (an all-reduce of dtype buffers)."""
    from pkb_env.tasks.tp_muon_orthogonalization.reference import QUINTIC

    x = full["x"]
    blocks = [b.to(dtype) for b in (x.float() / x.float().norm()).chunk(world, dim=1)]
    for a, b, c in QUINTIC[:steps or full["steps"]]:
        gram = blocks[0] @ blocks[0].mT
        for block in blocks[1:]:
            gram = gram + block @ block.mT
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        blocks = [torch.addmm(block, update, block, beta=a) for block in blocks]
    return torch.cat(blocks, dim=1).to(x.dtype)


def _chunked_in_dtype(q, k, v, log_decay, beta, dtype: torch.dtype) -> torch.Tensor:
    """The delta rule's chunked form as fla's kernels keep it: the WY terms from the reference, then every
    stored intermediate (corrected values, WY factors, gated queries, masked scores, the state a chunk
    reads) rounded to the dtype; accumulation and the carried state in fp32. Inputs (B, S, h, ...)."""
    from pkb_env.tasks.kimi_delta_attention_cp_tp.reference import _chunk_terms

    r = _rounder(dtype)
    terms = _chunk_terms(*(x.float().transpose(1, 2) for x in (q, k, v, log_decay, beta)))
    state = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[-1], dtype=torch.float32)
    out = []
    for t in terms:
        read = r(state)
        u = r(r(t["u0"]) - r(t["w"]) @ read)
        out.append(r(t["q"]) @ read + r(t["p"]) @ u)
        state = t["decay_end"].unsqueeze(-1) * state + r(t["k_end"]).mT @ u
    return torch.cat(out, dim=2).transpose(1, 2)


def gated_deltanet_in_dtype(full: dict, dtype: torch.dtype, world: int) -> torch.Tensor:
    """Gated DeltaNet is KDA with one decay per head: the same chunk kernel, the decay broadcast over K."""
    key_dim = full["q"].shape[-1]
    q = F.normalize(full["q"].float(), dim=-1, eps=1e-6) * key_dim ** -0.5
    k = F.normalize(full["k"].float(), dim=-1, eps=1e-6)
    log_decay = -full["a_log"].float().exp() * F.softplus(full["gate"].float() + full["dt_bias"].float())
    out = _chunked_in_dtype(q, k, full["v"], log_decay.unsqueeze(-1).expand_as(k), full["beta"], dtype)
    return out.to(full["v"].dtype)


def kimi_delta_attention_in_dtype(full: dict, dtype: torch.dtype, world: int) -> torch.Tensor:
    from pkb_env.tasks.kimi_delta_attention_cp_tp.reference import LOWER_BOUND

    _, _, heads, key_dim = full["q"].shape
    scale = full["a_log"].float().exp().view(1, 1, heads, 1)
    log_decay = LOWER_BOUND * torch.sigmoid(scale * (full["g"].float() + full["dt_bias"].float().view(heads, -1)))
    q = F.normalize(full["q"].float(), dim=-1) * key_dim ** -0.5
    k = F.normalize(full["k"].float(), dim=-1)
    return _chunked_in_dtype(q, k, full["v"], log_decay, full["beta"].float().sigmoid(), dtype).to(full["q"].dtype)


def magi_flash_in_dtype(full: dict, dtype: torch.dtype, world: int, block: int = 256) -> torch.Tensor:
    """Flash attention per range: scores in fp32 from the dtype's q and k, an online softmax over key blocks,
    the probabilities rounded to the dtype before P V (fp32 accumulation), the output rounded once."""
    query, key_value = full["query"], full["key_value"]
    ranges, tokens, heads, head_dim = query.shape
    kv = key_value.reshape(ranges * tokens, -1, 2 * head_dim).repeat_interleave(heads // key_value.shape[2], 1)
    out = torch.empty_like(query)
    for r, (start, end) in enumerate(full["k_ranges"].tolist()):
        q = query[r].float().transpose(0, 1)                                          # (h, N, D)
        best = q.new_full(q.shape[:-1] + (1,), -math.inf)
        total, acc = torch.zeros_like(best), torch.zeros_like(q)
        for first in range(start, end, block):
            keys = kv[first:min(end, first + block)].float().transpose(0, 1)
            scores = q @ keys[..., :head_dim].mT / math.sqrt(head_dim)
            new_best = torch.maximum(best, scores.amax(-1, keepdim=True))
            probs, shrink = torch.exp(scores - new_best), torch.exp(best - new_best)
            total = total * shrink + probs.sum(-1, keepdim=True)
            acc = acc * shrink + probs.to(dtype).float() @ keys[..., head_dim:]
            best = new_best
        out[r] = (acc / total).transpose(0, 1).to(query.dtype)
    return out


EMULATIONS = {
    "tp_muon_orthogonalization": ("Newton-Schulz iterations in the dtype (Muon)", muon_in_dtype, "out",
                                  ("one iteration short", lambda full, dt, w: muon_in_dtype(full, dt, w, steps=4))),
    "gated_deltanet_cp": ("fla-like chunk kernel, intermediates in the dtype", gated_deltanet_in_dtype, "out", None),
    "kimi_delta_attention_cp_tp": ("fla-like chunk kernel, intermediates in the dtype",
                                   kimi_delta_attention_in_dtype, "out", None),
    "magi1_cso_async_attention": ("flash attention, probabilities in the dtype", magi_flash_in_dtype, "out", None),
}


# -- measuring ---------------------------------------------------------------------------------------------

def _ratio(got: torch.Tensor, want: torch.Tensor, tol) -> float:
    e, g = want.double(), got.double()
    return float(((g - e).abs() / (tol.atol + tol.rtol * e.abs())).max())


def headroom(task: str, preset, world: int, dtype: str, trials: int, device: str) -> list[dict]:
    from pkb_env.contract import Group, Tensor, rank_seeds
    from pkb_env.task import load_task

    spec = load_task(task)
    label, emulate, output, near_miss = EMULATIONS[task]
    dims = spec.preset(preset).dims
    tol = spec.tolerance(dtype, dims, world, output)
    worst = {label: 0.0}
    if near_miss:
        worst[near_miss[0]] = math.inf
    for trial in range(trials):
        inputs = []
        for r in range(world):
            seeds = rank_seeds(SECRET, spec.layout(world, dims), r, task, dtype, trial)
            inputs.append(dict(zip(spec.parameters, spec.make_inputs(spec.input_context(r, world, preset, dtype,
                                                                                       device, seeds)))))
        view = spec.world(dims, world, dtype)
        want = _global(spec, view, spec.golden(inputs, view), output)
        full = {d.name: view.assemble(inputs, d.name) if isinstance(d, Tensor) else inputs[0][d.name]
                for d in spec.inputs if not isinstance(d, Group)}
        worst[label] = max(worst[label], _ratio(emulate(full, getattr(torch, dtype), world), want, tol))
        if near_miss:
            worst[near_miss[0]] = min(worst[near_miss[0]], _ratio(near_miss[1](full, getattr(torch, dtype), world),
                                                                  want, tol))
    return [{"task": task, "dims": dict(dims), "world_size": world, "dtype": dtype, "variant": name,
             "error_over_allowed": value, "atol": tol.atol, "rtol": tol.rtol} for name, value in worst.items()]


def _global(spec, view, per_rank: list, output: str) -> torch.Tensor:
    """The golden's global output from its per-rank blocks (the blocks of the first rank holding each)."""
    from pkb_env.contract import Sharded

    decl = next(o for o in spec.outputs if o.name == output)
    if not isinstance(decl.layout, Sharded):
        return per_rank[0]
    blocks = {}
    for rank, block in enumerate(per_rank):
        blocks.setdefault(decl.layout.block_index(view.layout, rank), block)
    return torch.cat([blocks[i] for i in sorted(blocks)], dim=decl.layout.axis)


def main() -> None:
    from pkb_env.contract import Preset
    from pkb_env.task import load_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", nargs="*", default=None, help=f"default: {', '.join(EMULATIONS)}")
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--dims", nargs="*", default=[], help="override preset dims: N=2048 HQ=8 ...")
    parser.add_argument("--world-size", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--dtype", nargs="+", default=["bfloat16", "float16"])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", ".out"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for task in args.task or list(EMULATIONS):
        spec = load_task(task)
        base = spec.preset(args.preset)
        preset = Preset({**base.dims, **{k: int(v) for k, v in (d.split("=") for d in args.dims)}}, base.dtype)
        for world in args.world_size:
            if spec.world_size_problem(world, preset) is None:
                for dtype in args.dtype:
                    rows += headroom(task, preset, world, dtype, args.trials, args.device)
    for r in rows:
        print(f"{r['task']:28s} W={r['world_size']} {r['dtype']:9s} {r['variant']:52s} "
              f"error / allowed = {r['error_over_allowed']:.3f}")
    (out / "tolerance_headroom.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
