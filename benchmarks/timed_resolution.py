"""The timed-output check's resolution, measured: how often an error over the tolerance in one timed call passes.

    python benchmarks/timed_resolution.py --seeds 40

One burst of `--calls` calls of a (256, 1024) bf16 output (all_reduce's `bench` rows cut to a quarter, the
issue-31 tolerance atol 0.0039 + rtol 0.0156); in one call, a fraction f of the elements (a contiguous run, or spread at random)
gets an error of k times its own tolerance (random signs); every other value is the reference's. The
rank-side fingerprints (pkb_env/ranks/fingerprints.py) and the judge's comparison
(pkb_env/judge/fingerprints.py) run in this process, once per seed (a fresh fingerprint seed each time).
For each (k, f): the share of seeds where the call is caught, by the projections (their aggregate bound
per block) and in all (projections or the values at the secret positions). Also the issue's own case:
half of one call times 1.02 in bf16. Prints a table (docs/timing.md, "Resolution").
"""
from __future__ import annotations

import argparse

import torch

from pkb_env.contract import Check, Tolerance
from pkb_env.judge.fingerprints import compare_burst
from pkb_env.ranks.fingerprints import fingerprint_calls

ROWS = 256   # a quarter of bench's 1024 rows: 64 blocks of 4096 values, as at bench, and a quarter of the time
TOL = Tolerance(0.00390625, 0.015625, "all_reduce bench bf16")


def payload(outputs, seed, reference):
    rules = {"output": [TOL.atol, TOL.rtol, False]}
    inputs = [(torch.zeros(1),) for _ in outputs]
    return {"outputs": fingerprint_calls(outputs, seed, rules, bound=reference),
            "inputs": fingerprint_calls(inputs, seed + 1, None, root="argument"), "problems": [], "samples": {}}


def verdict(expected, got, seed) -> tuple[bool, bool]:
    """(caught by the projections alone, caught at all) for one burst. Projections alone: the candidate's
    values at the secret positions replaced by the reference's, so that only the aggregate bound can see."""
    exp, cand = payload(expected, seed, True), payload(got, seed, False)
    checks = {"output": Check(TOL)}
    caught = bool(compare_burst(exp, cand, checks, 0, 0))
    for mine, theirs in zip(cand["outputs"]["groups"], exp["outputs"]["groups"]):
        mine["x"] = theirs["x"]
    return bool(compare_burst(exp, cand, checks, 0, 0)), caught


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=2)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    expected = [(torch.randn(ROWS, 1024, generator=gen) * 2).to(torch.bfloat16) for _ in range(args.calls)]
    bad = args.calls // 2
    e = expected[bad].double().view(-1)
    t = TOL.atol + TOL.rtol * e.abs()
    cases = []
    for k in (1.28, 2.0, 10.0):
        for f in (1.0, 0.1, 0.01, 0.001):
            cases.append((f"{k}x the tolerance on {f:g} of the elements, spread at random", k, f, "random"))
    cases.append(("10.0x the tolerance on a run of 0.001 of the elements", 10.0, 0.001, "run"))
    rows = []
    for name, k, f, spread in cases:
        proj = hits = 0
        for seed in range(args.seeds):
            g = torch.Generator().manual_seed(1000 + seed)
            count = max(1, int(f * e.numel()))
            where = (torch.arange(count) if spread == "run" else torch.randperm(e.numel(), generator=g)[:count])
            signs = torch.where(torch.rand(count, generator=g) < 0.5, -1.0, 1.0).double()
            wrong = e.clone()
            wrong[where] += k * t[where] * signs
            got = [x.clone() for x in expected]
            got[bad] = wrong.view(ROWS, 1024).to(torch.bfloat16)
            p, a = verdict(expected, got, 7 + seed)
            proj, hits = proj + p, hits + a
        rows.append((name, proj / args.seeds, hits / args.seeds))
    nudge_proj = nudge_all = 0
    for seed in range(args.seeds):
        got = [x.clone() for x in expected]
        half = got[bad].view(-1)[: e.numel() // 2]
        half.copy_((half.float() * 1.02).to(torch.bfloat16))
        p, a = verdict(expected, got, 7 + seed)
        nudge_proj, nudge_all = nudge_proj + p, nudge_all + a
    rows.append(("the issue's nudge: half of one call x 1.02 (bf16)", nudge_proj / args.seeds, nudge_all / args.seeds))
    width = max(len(r[0]) for r in rows)
    print(f"{'error in one call of ' + str(args.calls):{width}s}  projections  all checks   ({args.seeds} seeds)")
    for name, p, a in rows:
        print(f"{name:{width}s}  {p:11.0%}  {a:10.0%}")


if __name__ == "__main__":
    main()
