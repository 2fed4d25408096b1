"""The judge's operations on a generation, in judge terms: load, trials, bursts, fingerprints, replays.

Each turns a request into per-rank messages (every rank gets only its own seeds), waits with a deadline,
and decodes what came back (the generation has already checked every frame against its schema and the
request's nonce). Payloads are unpacked with weights_only loading (see channel.py). Nothing here
decides a count or believes a time: the timing protocol (pkb_env/judge/timing.py) does both.

A workload names what the calls run: {"task": name, "preset", "dtype", "rng": "cpu" | "device"} for the
loaded solution on the task's inputs, or {"collective": "all_reduce", "bytes": n} for the calibration.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pkb_env.executors import channel
from pkb_env.executors.generation import Generation

Seeds = dict[str, int]  # a rank's seeds for one call, scope -> seed (pkb_env/contract/inputs.py)


@dataclass
class TrialOutputs:
    outputs: list[Any]            # per rank
    seconds: list[float]          # per rank, the untimed trial call (for deadlines, not for scoring)
    aliases: list[list[str]]      # per rank: output paths that are views of inputs
    mutated: list[list[str]]      # per rank: arguments changed by the call
    shares: list[list[int]]       # per rank: earlier trials whose output memory this output shares
    input_bytes: int = 0          # the largest rank's, for the timing plan (believed from the reference only)
    output_bytes: int = 0


def load(gen: Generation, task: str, source: str | None, timeout: float) -> float:
    gen.ask({"op": "load", "task": task, "source": source, "label": "build"})
    got = gen.collect("built", 1, time.monotonic() + timeout, "build")
    return max(d[0].header["seconds"] for d in got)


def trials(gen: Generation, workload: dict, seeds: list[list[Seeds]], label: str, timeout: float) -> list[TrialOutputs]:
    """Run len(seeds[0]) calls; seeds[r][k] are rank r's seeds for call k."""
    count = len(seeds[0])
    gen.ask([{"op": "trials", "workload": workload, "seeds": s, "label": label} for s in seeds])
    got = gen.collect("trial", count, time.monotonic() + timeout, label)
    results = []
    for k in range(count):
        per_rank = [got[r][k] for r in range(gen.world_size)]
        results.append(TrialOutputs(
            outputs=[_unpack(d)["output"] for d in per_rank],
            seconds=[d.header["seconds"] for d in per_rank],
            aliases=[d.header["aliases"] for d in per_rank],
            mutated=[d.header["mutated"] for d in per_rank],
            shares=[d.header["shares"] for d in per_rank],
            input_bytes=max(d.header["input_bytes"] for d in per_rank),
            output_bytes=max(d.header["output_bytes"] for d in per_rank)))
    return results


@dataclass
class RankBurst:
    """One rank's report of one burst, and when the judge read it."""

    seen_at: float
    ended_at: float
    busy_s: float
    host_s: float
    idle_s: float | None
    marks: list[float]
    received: float


@dataclass
class BurstRecord:
    calls: int
    marks_every: int              # a mark after every this many calls
    released: float               # the judge's clock at the release
    ranks: list[RankBurst]


def burst(gen: Generation, workload: dict, seeds: list[Seeds], calls: int, marks_every: int, capture_every: bool,
          timeout: float) -> BurstRecord:
    """One burst of `calls` calls: every rank gated, then released at once by the judge. seeds[r]: rank r's
    base seeds of the burst (each call's are derived from them, bursts.make_sets)."""
    deadline = time.monotonic() + timeout
    epoch = gen.page.next_epoch()
    gen.ask([{"op": "burst", "workload": workload, "seeds": s, "calls": calls, "epoch": epoch,
              "marks_every": marks_every, "capture_every": capture_every, "label": "timing"} for s in seeds])
    gen.collect("gated", 1, deadline, "timing")
    released = gen.release(epoch)
    got = gen.collect("burst", 1, deadline, "timing")
    ranks = []
    for (d,) in got:
        h = d.header
        ranks.append(RankBurst(h["seen_at"], h["ended_at"], h["busy_s"], h["host_s"], h["idle_s"], h["marks"],
                               d.received))
    return BurstRecord(calls, marks_every, released, ranks)


def fingerprints(gen: Generation, index: int, seed: int, rules: dict[str, list], sample: list[int],
                 timeout: float) -> list[dict]:
    """Per rank: fingerprints of the last burst's outputs and inputs, its problems, the sampled outputs.
    `rules`: path -> [atol, rtol, rows form a set], the step's comparison checks."""
    gen.ask({"op": "fingerprints", "burst": index, "seed": seed, "rules": rules, "sample": sample,
             "label": "timed-output check"})
    return [_unpack(d[0]) for d in gen.collect("sketches", 1, time.monotonic() + timeout, "timed-output check")]


def replay(gen: Generation, workload: dict, seeds: list[Seeds], calls: int, index: int, seed: int,
           rules: dict[str, list], sample: list[int], timeout: float) -> list[dict]:
    """The reference's fingerprints (with its bound terms) for the inputs of a candidate's burst."""
    gen.ask([{"op": "replay", "workload": workload, "seeds": s, "calls": calls, "burst": index, "seed": seed,
              "rules": rules, "sample": sample, "label": "timed-output check"} for s in seeds])
    return [_unpack(d[0]) for d in gen.collect("sketches", 1, time.monotonic() + timeout, "timed-output check")]


def copy_rates(gen: Generation, size: int, timeout: float) -> list[list[float]]:
    """[src, dst, GB/s] for every ordered GPU pair, measured by rank 0."""
    gen.ask([{"op": "copies", "bytes": size if r == 0 else 0, "label": "calibration"} for r in range(gen.world_size)])
    return gen.collect("copies", 1, time.monotonic() + timeout, "calibration")[0][0].header["table"]


def _unpack(delivery) -> dict:
    try:
        data = channel.unpack_tensors(delivery.payload)
    except Exception as exc:  # weights_only refusal, truncated data: a forged or broken payload
        raise channel.ChannelError(f"unreadable payload ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise channel.ChannelError("a payload that is not of the judge's form")
    return data
