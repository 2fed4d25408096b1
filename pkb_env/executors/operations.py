"""The judge's operations on a generation, in judge terms: load, trials, timed calls, snapshots, calibrate.

Each turns a request into per-rank messages (every rank gets only its own seeds), waits with a deadline,
and decodes what came back. Payloads are unpacked with weights_only loading (see channel.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pkb_env.executors import channel
from pkb_env.executors.generation import Generation

Seeds = tuple[int, int]  # (this rank's seed, the seed shared by all ranks)


@dataclass
class TrialOutputs:
    outputs: list[Any]            # per rank
    seconds: list[float]          # per rank, the untimed trial call (for deadlines, not for scoring)
    aliases: list[list[str]]      # per rank: output paths that are views of inputs
    mutated: list[list[str]]      # per rank: arguments changed by the call


def load(gen: Generation, task: str, source: str | None, timeout: float) -> float:
    gen.send({"op": "load", "task": task, "source": source, "label": "build"})
    got = gen.collect("built", 1, time.monotonic() + timeout, "build")
    return max(d[0].header["seconds"] for d in got)


def trials(gen: Generation, preset: str, dtype: str, seeds: list[list[Seeds]], label: str,
           timeout: float, rng: str = "cpu") -> list[TrialOutputs]:
    """Run len(seeds[0]) calls; seeds[r][k] are rank r's seeds for call k; rng: "cpu" | "device" draws."""
    count = len(seeds[0])
    gen.send([{"op": "trials", "preset": preset, "dtype": dtype, "seeds": s, "label": label, "rng": rng}
              for s in seeds])
    got = gen.collect("trial", count, time.monotonic() + timeout, label)
    results = []
    for k in range(count):
        per_rank = [got[r][k] for r in range(gen.world_size)]
        results.append(TrialOutputs(
            outputs=[_unpack(d) for d in per_rank],
            seconds=[float(d.header.get("seconds", 0.0)) for d in per_rank],
            aliases=[list(d.header.get("aliases", [])) for d in per_rank],
            mutated=[list(d.header.get("mutated", [])) for d in per_rank]))
    return results


@dataclass
class TimedCalls:
    host: list[list[float]]            # per rank, per call: seconds across a full device synchronisation
    events: list[list[float]] | None   # per rank, per call: CUDA-event seconds on the caller's stream
    warmup: int                        # warm-up calls (the first, sizing call included)
    sets: int                          # distinct input sets; timed call i used set i % sets


def timed_calls(gen: Generation, preset: str, dtype: str, sets: list[list[Seeds]], warmup_sets: list[list[Seeds]],
                protocol: dict[str, float], timeout: float) -> TimedCalls:
    gen.send([{"op": "time", "preset": preset, "dtype": dtype, "sets": s, "warmup_sets": w, "label": "timing",
               "rng": "device", **protocol} for s, w in zip(sets, warmup_sets)])
    got = gen.collect("timing", 1, time.monotonic() + timeout, "timing")
    headers = [d[0].header for d in got]
    host = [[float(t) for t in h["times"]] for h in headers]
    events = [[float(t) for t in h["event_times"]] for h in headers] if headers[0].get("event_times") else None
    if len({len(t) for t in host}) != 1 or len({int(h["sets"]) for h in headers}) != 1:
        raise channel.ChannelError("ranks reported different numbers of timed calls")
    return TimedCalls(host, events, int(headers[0]["warmup"]), int(headers[0]["sets"]))


def snapshots(gen: Generation, indices: list[int], timeout: float) -> list[list[Any]]:
    """Outputs of the timed calls at `indices`: result[i][rank]."""
    gen.send({"op": "snapshots", "indices": indices, "label": "timed-output check"})
    got = gen.collect("snapshot", len(indices), time.monotonic() + timeout, "timed-output check")
    return [[_unpack(got[r][i]) for r in range(gen.world_size)] for i in range(len(indices))]


def calibrate(gen: Generation, sizes: list[int], statistic: str, timeout: float) -> dict[str, Any]:
    gen.send({"op": "calibrate", "sizes": sizes, "statistic": statistic, "label": "calibration"})
    got = gen.collect("calibrated", 1, time.monotonic() + timeout, "calibration")
    return got[0][0].header["result"]


def _unpack(delivery) -> Any:
    if delivery.payload is None:
        raise channel.ChannelError("a result arrived without its outputs")
    try:
        data = channel.unpack_tensors(delivery.payload)
    except Exception as exc:  # weights_only refusal, truncated data: a forged or broken payload
        raise channel.ChannelError(f"unreadable outputs ({type(exc).__name__})") from None
    if not isinstance(data, dict) or "output" not in data:
        raise channel.ChannelError("a result payload is not of the judge's form")
    return data["output"]
