"""Point-to-point and collectives of CUDA tensors on emulated ranks (pkb_env/ranks/host_staged.py), one GPU.

* The staging scenarios of tests/ranks/host_staged_ranks.py (rings, pairwise exchanges, halos, results landing at
  wait, every collective the references call: all_reduce incl. AVG, reduce, broadcast, all_gather(_into_tensor),
  reduce_scatter(_tensor), all_to_all(_single) even and uneven, gather, scatter, barrier, subgroups, bf16) on
  four ranks sharing cuda:0.
* Through the judge, four emulated ranks at `bench` in bfloat16: the kinds of correct candidate issue 31 found
  rejected as runtime errors (gloo aborting every rank on a CUDA tensor's send): a ring all-gather before the
  GEMM (allgather_gemm), a ring reduce-scatter after the GEMM (gemm_reducescatter), a pairwise all-to-all
  (ulysses_all_to_all, ulysses_gather_heads_scatter_seq) and a ring all-gather into views of the output
  (ulysses_all_gather); and the reference itself, whose ring tasks take their CUDA path under this group.
"""
from __future__ import annotations

import textwrap

import gymnasium
import pytest
import torch

import pkb_env  # noqa: F401
from ranks.test_host_staged import SCENARIOS, run_ranks  # the same scenarios as on CPU ranks (tests/ is on sys.path)

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture(scope="module")
def cuda_ranks():
    if GPUS < 1:
        pytest.skip("needs a GPU")
    return run_ranks(4, "cuda:0")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_staged_scenario_on_four_ranks_of_one_gpu(cuda_ranks, scenario):
    failed = {rank: result[scenario] for rank, result in enumerate(cuda_ranks) if result[scenario] is not None}
    assert not failed, failed


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


P2P_CANDIDATES = {
    "allgather_gemm": _code("""
        import torch, torch.distributed as dist

        def solution(A, B):
            rank, world = dist.get_rank(), dist.get_world_size()
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            blocks = [torch.empty(A.shape, dtype=A.dtype, device=A.device) for _ in range(world)]
            blocks[rank].copy_(A)
            for step in range(world - 1):  # ring: pass on the block received last step
                send, recv = blocks[(rank - step) % world], blocks[(rank - step - 1) % world]
                for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt),
                                                    dist.P2POp(dist.irecv, recv, prv)]):
                    work.wait()
            return torch.cat(blocks, dim=1) @ B
        """),
    "gemm_reducescatter": _code("""
        import torch, torch.distributed as dist

        def solution(A, B):
            rank, world = dist.get_rank(), dist.get_world_size()
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            blocks = (A @ B).float().chunk(world, dim=0)
            acc = blocks[(rank - 1) % world].contiguous()
            for step in range(1, world):  # ring: add this rank's share to the partial received, pass it on
                incoming = torch.empty_like(acc)
                send = dist.isend(acc, nxt)
                dist.recv(incoming, prv)
                send.wait()
                acc = incoming + blocks[(rank - step - 1) % world]
            return acc.to(A.dtype)
        """),
    "ulysses_all_to_all": _code("""
        import torch, torch.distributed as dist

        def solution(x, scatter_dim, gather_dim, group):
            world, me = dist.get_world_size(group), dist.get_rank(group)
            blocks = [b.contiguous() for b in x.chunk(world, dim=scatter_dim)]
            got = [torch.empty_like(b) for b in blocks]
            got[me].copy_(blocks[me])
            for shift in range(1, world):  # pairwise: rank me sends to me + shift, receives from me - shift
                dst, src = (me + shift) % world, (me - shift) % world
                works = dist.batch_isend_irecv([
                    dist.P2POp(dist.isend, blocks[dst], dist.get_global_rank(group, dst), group),
                    dist.P2POp(dist.irecv, got[src], dist.get_global_rank(group, src), group)])
                for work in works:
                    work.wait()
            return torch.cat(got, dim=gather_dim)
        """),
    "ulysses_gather_heads_scatter_seq": _code("""
        import torch, torch.distributed as dist

        def solution(x, seq_dim, head_dim, group):
            world, me = dist.get_world_size(group), dist.get_rank(group)
            blocks = [b.contiguous() for b in x.chunk(world, dim=seq_dim)]
            got = [torch.empty_like(b) if r != me else blocks[me] for r, b in enumerate(blocks)]
            peers = [r for r in range(world) if r != me]
            works = [dist.irecv(got[r], dist.get_global_rank(group, r), group=group) for r in peers]
            works += [dist.isend(blocks[r], dist.get_global_rank(group, r), group=group) for r in peers]
            for work in works:
                work.wait()
            return torch.cat(got, dim=head_dim)
        """),
    "ulysses_all_gather": _code("""
        import torch, torch.distributed as dist

        def solution(x, group):
            world, me = dist.get_world_size(group), dist.get_rank(group)
            nxt = dist.get_global_rank(group, (me + 1) % world)
            prv = dist.get_global_rank(group, (me - 1) % world)
            out = x.new_empty((world * x.shape[0], *x.shape[1:]))
            blocks = out.chunk(world)  # contiguous views of the output: received in place
            blocks[me].copy_(x)
            for step in range(world - 1):
                send, recv = blocks[(me - step) % world], blocks[(me - step - 1) % world]
                for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt, group),
                                                    dist.P2POp(dist.irecv, recv, prv, group)]):
                    work.wait()
            return out
        """),
}


@pytest.fixture(scope="module")
def emulated4():
    if GPUS < 1:
        pytest.skip("needs a GPU")
    env = gymnasium.make("pkb_env/ParallelKernel-v0", task="allgather_gemm", world_size=4,
                         executor="cuda-emulated", preset="bench", dtype="bfloat16", max_turns=1000)
    env.reset(seed=3)
    yield env
    env.close()


@pytest.mark.parametrize("task", sorted(P2P_CANDIDATES))
def test_point_to_point_candidate_correct_on_four_emulated_ranks(emulated4, task):
    emulated4.reset(options={"task": task})
    _, _, _, _, info = emulated4.step(P2P_CANDIDATES[task])
    assert info["correct"], info["feedback"]
    assert info["record"].run.trials >= 2


@pytest.mark.parametrize("task", ["ring_attention", "ring_attention_pp"])
def test_ring_references_on_four_emulated_ranks(emulated4, task):
    """The reference as a candidate: under the host-staged group its rings send CUDA tensors (not gloo, so not
    its host-only path), through isend/irecv/batch_isend_irecv and, for the pipeline, send/recv."""
    obs, _ = emulated4.reset(options={"task": task})
    _, _, _, _, info = emulated4.step(obs["reference"])
    assert info["correct"], info["feedback"]
