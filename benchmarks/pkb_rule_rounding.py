"""Why a kernel can be correct by pkb-env and wrong by PKB's own check on the same outputs (docs/pkb_corpus.md,
"Where the two rules part").

PKB compares every output with `torch.allclose(got.float(), expected.float(), atol=1e-2, rtol=1e-2)` against its
reference run in the inputs' dtype. A kernel that computes in float32 and rounds to bfloat16 once (what a fused
CUDA kernel does) differs from a reference that rounds after every PyTorch op, or after every hop of NCCL's sum,
by a few bfloat16 steps: on elements near zero that is far over an absolute 1e-2. Two parts:

1. **PKB's own harness, simulated on PKB's own inputs** (`utils/input_output_tensors.py`: randn everywhere; one
   process, the ranks' work done in turn): the rounding-once kernel against the op-by-op reference under PKB's rule,
   at PKB's world size 8.
2. **The judge**: the same kernels as PKB-format files (`JudgeConfig(pkb=True)`), on CPU ranks at `bench` in
   bfloat16, verdicts only: pkb-env's verdict and PKB's rule (`record.pkb.pkb_rule`) on the same trials.

    python benchmarks/pkb_rule_rounding.py                       # both parts, CPU ranks at world size 4
    python benchmarks/pkb_rule_rounding.py --trials 20 --skip-judge
"""
from __future__ import annotations

import argparse
import sys

import torch

from pkb_env import JudgeConfig
from pkb_env.client import LocalClient
from pkb_env.compat.rule import ATOL, RTOL
from pkb_env.tables import table

# PKB problem 13 as a fused kernel computes it: partial products in float32, summed in float32, one rounding.
GEMM_ALLREDUCE = '''
import torch
import torch.distributed as dist

@torch.no_grad()
def solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:
    C = torch.matmul(A_local.float(), B_local.float())
    dist.all_reduce(C, op=dist.ReduceOp.SUM)
    return C.to(A_local.dtype)
'''

# PKB problem 17 the same way: the rotation in float32, rounded once, then PKB's all-gather.
ROPE_ALLGATHER = '''
import torch
import torch.distributed as dist

def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

def solution(q_local, k_local, cos_local, sin_local):
    cos, sin = cos_local.unsqueeze(2).float(), sin_local.unsqueeze(2).float()
    q = (q_local.float() * cos + _rotate_half(q_local.float()) * sin).to(q_local.dtype)
    k = (k_local.float() * cos + _rotate_half(k_local.float()) * sin).to(k_local.dtype)
    world = dist.get_world_size()
    qs, ks = [torch.empty_like(q) for _ in range(world)], [torch.empty_like(k) for _ in range(world)]
    dist.all_gather(qs, q.contiguous())
    dist.all_gather(ks, k.contiguous())
    return torch.cat(qs, dim=1), torch.cat(ks, dim=1)
'''

def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def gemm_allreduce(world: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """PKB 13 on PKB's inputs (randn, K = 512 a rank, M = N = 512 here): the reference (a bfloat16 matmul per rank,
    then a sum that rounds after each rank's term, as a ring's hops do) and the rounding-once kernel."""
    bf16 = torch.bfloat16
    parts = [(torch.randn(512, 512, generator=gen).to(bf16), torch.randn(512, 512, generator=gen).to(bf16))
             for _ in range(world)]
    reference = parts[0][0] @ parts[0][1]
    for a, b in parts[1:]:
        reference = (reference.float() + (a @ b).float()).to(bf16)
    once = sum(a.float() @ b.float() for a, b in parts).to(bf16)
    return reference, once


def rope(world: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """PKB 17 on PKB's inputs (q, cos and sin all randn) for one rank's shard: PKB's op-by-op bfloat16 rotation and
    the rounding-once one (the all-gather moves values unchanged)."""
    bf16 = torch.bfloat16
    q = torch.randn(2, 128, 8, 64, generator=gen).to(bf16)
    cos, sin = (torch.randn(2, 128, 1, 64, generator=gen).to(bf16) for _ in range(2))
    reference = q * cos + _rotate_half(q) * sin
    once = (q.float() * cos.float() + _rotate_half(q.float()) * sin.float()).to(bf16)
    return reference, once


# PKB id: (task, the rounding-once kernel as a PKB file, its simulation on PKB's inputs)
PROBLEMS = {13: ("gemm_allreduce", GEMM_ALLREDUCE, gemm_allreduce), 17: ("rope_allgather", ROPE_ALLGATHER, rope)}


def simulate(trials: int, world: int) -> list[list]:
    rows = []
    for pkb_id, (name, _, make) in PROBLEMS.items():
        gen = torch.Generator().manual_seed(pkb_id)
        failed, worst = 0, 0.0
        for _ in range(trials):
            reference, once = (t.float() for t in make(world, gen))
            failed += not torch.allclose(once, reference, atol=ATOL, rtol=RTOL)
            worst = max(worst, float(((once - reference).abs() / (ATOL + RTOL * reference.abs())).max()))
        rows.append([pkb_id, name, f"{failed} of {trials}", f"{worst:.1f}"])
    return rows


def judge(world: int) -> list[list]:
    config = JudgeConfig(executor="cpu", world_size=world, preset="bench", pkb=True, timing=False)
    rows = []
    with LocalClient(config) as client:
        for pkb_id, (task, source, _) in PROBLEMS.items():
            record = client.submit(task, source).result()
            rows.append([pkb_id, task, record.verdict.value, record.pkb.pkb_rule if record.pkb else "-",
                         record.pkb.statement if record.pkb else "-"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10, help="simulated PKB trials per problem")
    parser.add_argument("--world-size", type=int, default=4, help="CPU ranks of the judged part")
    parser.add_argument("--skip-judge", action="store_true", help="the simulation only")
    args = parser.parse_args()
    print("PKB's harness simulated on PKB's inputs at world size 8: the rounding-once kernel under allclose "
          f"(atol={ATOL}, rtol={RTOL})")
    print(table(["PKB", "problem", "trials failed", "worst error / tolerance"], simulate(args.trials, 8)))
    if not args.skip_judge:
        print(f"\nthe same kernels judged as PKB files (CPU ranks, world size {args.world_size}, bench, bfloat16)")
        print(table(["PKB", "task", "pkb-env verdict", "PKB's rule", "statement"], judge(args.world_size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
