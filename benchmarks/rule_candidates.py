"""Wrong candidates of the six kinds that slipped past the judge before every step's trials reached every
stated rule (issue 42, item 2), judged for --steps steps each on CPU ranks; and the task's reference beside.

Each candidate is its task's reference with one plausible mistake that only a corner of the statement shows:

    floor partition     gnn_sparse_embedding_all2all    owners by floor(V / W), the last rank taking the rest
    present experts     fused_moe_fwd                   local experts indexed by their place among those present
    reciprocal codes    quantized_grad_allreduce        codes from x * (127 / amax) instead of x / s
    greedy suppression  sam3_allgather_iou_suppression  a suppressed object suppresses nothing
    no clamp            gsplat_3d_gaussian_splatting    the Jacobian at the unclamped mean
    16-bit logits       openclip_contrastive_loss       logits computed in the features' dtype

Measured before on 2026-12-04 (candidates written apart from the suite, W = 4): the first five accepted in
13/24, 17/32, 18/30 and 7/7 steps (present experts, reciprocal codes, greedy, no clamp) and every step where
W divided V (floor partition); a 16-bit rule in every float32 step (7/7). Each must now be wrong in every step.
`tests/tasks/test_rule_coverage_candidates.py` judges each for a few steps; this script runs the 20-step check:

    python benchmarks/rule_candidates.py --steps 20 --world-size 4
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from pkb_env.task import load_task


@dataclass(frozen=True)
class Candidate:
    name: str
    task: str
    edits: tuple[tuple[str, str], ...]
    why: str                     # the stated rule it breaks

    @property
    def source(self) -> str:
        """The task's reference with the edits; each must apply (so that a changed reference breaks this)."""
        source = load_task(self.task).reference_source
        for old, new in self.edits:
            assert old in source, f"{self.task}'s reference no longer contains {old!r}"
            source = source.replace(old, new)
        return source


GREEDY = """    order = torch.argsort(last.masked_fill(last < 0, 1 << 30), stable=True)
    suppressed = torch.zeros_like(last, dtype=torch.bool)
    for i in order.tolist():
        if suppressed[i] or last[i] < 0:
            continue
        hit = (overlaps | overlaps.T)[i] & later(last, last[i]) & ~suppressed
        suppressed |= hit
"""

CANDIDATES = (
    Candidate("floor partition", "gnn_sparse_embedding_all2all",
              (("    per_rank = -(-num_embeddings // dist.get_world_size(group))\n"
                "    return send_to_owners(idx, value, idx // per_rank, group)\n",
                "    per_rank = num_embeddings // dist.get_world_size(group)\n"
                "    owner = (idx // per_rank).clamp(max=dist.get_world_size(group) - 1)\n"
                "    return send_to_owners(idx, value, owner, group)\n"),),
              "rank s owns [s P, (s + 1) P) with P = ceil(V / W)"),
    Candidate("present experts", "fused_moe_fwd",
              (("    for j, x in enumerate(received[by_expert].split(per_expert)):\n",
                "    for j, x in enumerate([x for x in received[by_expert].split(per_expert) if len(x)]):\n"),
               ("    done[by_expert] = torch.cat(results)\n",
                "    done[by_expert] = torch.cat(results) if results else received[:0]\n")),
              "expert e's MLP for expert e's pairs, an expert with none among them"),
    Candidate("reciprocal codes", "quantized_grad_allreduce",
              (("    scale = blocks.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0\n"
                "    codes = (blocks / scale).round()",
                "    amax = blocks.abs().amax(dim=1, keepdim=True).clamp(min=1e-8)\n    scale = amax / 127.0\n"
                "    codes = (blocks * (127.0 / amax)).round()"),),
              "q = round(x / s), the fp32 quotient"),
    Candidate("greedy suppression", "sam3_allgather_iou_suppression",
              (("    suppressed = (overlaps & later(li, lj) & (lj > -1)).any(dim=1) | (overlaps & later(lj, li) & "
                "(li > -1)).any(dim=0)\n", GREEDY),),
              "every pair at IoU >= threshold decides, suppressed objects included"),
    Candidate("no clamp", "gsplat_3d_gaussian_splatting",
              (("    cx_tz = tz * torch.minimum(torch.maximum(tx / tz, -(cx / fx + 0.3 * tan_x)), (width - cx) / fx + "
                "0.3 * tan_x)\n", "    cx_tz = tx\n"),
               ("    cy_tz = tz * torch.minimum(torch.maximum(ty / tz, -(cy / fy + 0.3 * tan_y)), (height - cy) / fy + "
                "0.3 * tan_y)\n", "    cy_tz = ty\n")),
              "the Jacobian at the mean clamped to 1.3 times the field of view"),
    Candidate("16-bit logits", "openclip_contrastive_loss",
              (("        logits = logit_scale * (images @ texts.float().T) + logit_bias\n",
                "        logits = logit_scale * (image_features @ texts.T).float() + logit_bias\n"),),
              "the logits never rounded to the features' dtype"),
)


def judge_steps(env, task: str, source: str, steps: int) -> list[dict]:
    """`steps` steps of `source` on `task`, a new episode each (a correct answer ends one)."""
    infos = []
    for _ in range(steps):
        env.reset(options={"task": task})
        infos.append(env.step(source)[4])
    return infos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--world-size", type=int, default=4)
    args = parser.parse_args()
    import gymnasium

    import pkb_env  # noqa: F401  (registers the env)
    from pkb_env.config import JudgeConfig

    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=args.world_size,
                         executor="cpu", config=JudgeConfig(), max_turns=10_000)
    env.reset(seed=0)
    print(f"| candidate | task | rule broken | wrong | correct | other | reference correct | s |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for candidate in CANDIDATES:
            start = time.perf_counter()
            verdicts = [i["verdict"] for i in judge_steps(env, candidate.task, candidate.source, args.steps)]
            reference = [i["verdict"] for i in judge_steps(env, candidate.task,
                                                           load_task(candidate.task).reference_source, 3)]
            wrong, correct = verdicts.count("wrong"), verdicts.count("correct")
            print(f"| {candidate.name} | `{candidate.task}` | {candidate.why} | {wrong}/{args.steps} | {correct} | "
                  f"{len(verdicts) - wrong - correct} | {reference.count('correct')}/3 | "
                  f"{time.perf_counter() - start:.0f} |", flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()
