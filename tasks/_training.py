"""What the training-systems tasks on flat shards (PKB 43, 52, 53) share: dtypes and presets over P, the
values a shard.

PKB gives these problems 4096 values a shard at its default size, a few KiB: latency-bound. Each task
adds a `large` shard where the bytes moved set the time, with its own note (what those bytes are).

A plain module, not a task package: `pkb_env.task.task_names()` skips names starting with an underscore.
"""
from __future__ import annotations

from pkb_env.contract import Preset

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")


def shard_presets(bench_note: str, large_p: int, large_note: str) -> dict[str, Preset]:
    """`tiny` (256 values a shard, fp32, CPU ranks), `bench` (PKB's 4096, bf16) and `large` (`large_p`
    values a shard, bf16). A fresh dict per call."""
    return {"tiny": Preset({"P": 256}, "float32", "CPU ranks, milliseconds"),
            "bench": Preset({"P": 4096}, "bfloat16", f"PKB's size: {bench_note}"),
            "large": Preset({"P": large_p}, "bfloat16", large_note)}
