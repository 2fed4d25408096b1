"""The host-staged process group of emulated ranks (pkb_env/ranks/host_staged.py), its staging exercised on CPU
ranks: three real processes over gloo, started by a command, staging their host tensors through host copies
exactly as emulated ranks stage CUDA tensors (tests/ranks/host_staged_ranks.py has the scenarios: rings, pairwise
exchanges, halos, results landing at wait, every collective the references call, and the forms NCCL takes that
gloo refuses). The same scenarios run unstaged too, on the group every rank gets on CPU ranks.

On one H200 the same scenarios run on CUDA tensors, and the kinds of candidate the issue listed are judged on
four emulated ranks: tests/gpu/test_host_staged_gpu.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

RANKS = os.path.join(os.path.dirname(__file__), "host_staged_ranks.py")
SCENARIOS = ["judge_check", "ring_all_gather", "pairwise_all_to_all", "ring_reduce_scatter", "halo_send_recv",
             "lands_at_wait", "send_buffer_reusable_after_isend", "recv_any_source", "collectives", "nccl_forms",
             "bfloat16_ring", "subgroup_ring", "refuses_non_contiguous"]
# The group on CPU ranks (candidates' and the reference's) stages nothing and keeps gloo's own rules where a
# program relying on them races under NCCL too: an irecv's tensor filled before wait, an isend's buffer read until
# wait. A non-contiguous tensor it refuses, as NCCL does (gloo would move it).
UNSTAGED = [name for name in SCENARIOS if name not in ("lands_at_wait", "send_buffer_reusable_after_isend")]


def run_ranks(world: int, device: str, *mode: str) -> list[dict]:
    """Start `world` ranks of host_staged_ranks.py; each one's {scenario: error or None}."""
    with tempfile.TemporaryDirectory(prefix="pkb-staged-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [subprocess.Popen([sys.executable, RANKS, str(rank), str(world), store, device, *mode],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for rank in range(world)]
        results = []
        for rank, proc in enumerate(procs):
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}: {err[-2000:]}"
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results


@pytest.fixture(scope="module")
def cpu_ranks():
    return run_ranks(3, "cpu")  # three: the smallest ring that is not a pairwise swap


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_staged_scenario_on_cpu_ranks(cpu_ranks, scenario):
    failed = {rank: result[scenario] for rank, result in enumerate(cpu_ranks) if result[scenario] is not None}
    assert not failed, failed


def test_every_scenario_reported(cpu_ranks):
    assert all(sorted(result) == sorted(SCENARIOS) for result in cpu_ranks)


@pytest.fixture(scope="module")
def unstaged_ranks():
    return run_ranks(3, "cpu", "unstaged")


@pytest.mark.parametrize("scenario", UNSTAGED)
def test_scenario_on_the_cpu_ranks_group_of_candidates(unstaged_ranks, scenario):
    failed = {rank: result[scenario] for rank, result in enumerate(unstaged_ranks) if result[scenario] is not None}
    assert not failed, failed
