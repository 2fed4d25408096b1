"""Training data from an episode dataset (docs/data.md, "Commands"): SFT rows of the best solutions, DPO
pairs, and verl's RL prompts. Pure functions of the rows (reader.read_rows), and one writer of their parquet.

* `sft_rows`: per prompt (a task and the exact chat that asked), the best correct solutions (highest
  speedup, then roofline fraction) at or above `min_speedup`, as chat `messages` (the prompt and the
  completion as the assistant's reply): TRL's SFTTrainer's conversational format.
* Every assistant turn (SFT's, and DPO's chosen and rejected) is the reply the chat's system prompt asks for:
  one ```python block holding the module (`assistant_reply`). A completion that is one already stays as the
  model wrote it; bare code (the reference or file agents') or a reply of several blocks becomes the judged
  module in one fence. Training on bare code taught the opposite of what the system prompt demands.
* `preference_pairs`: per prompt, chosen/rejected completions (TRL's DPOTrainer, conversational
  prompt/chosen/rejected): a correct one over a wrong or failed one, or over a correct one slower by more
  than `margin` (timing noise).
* `verl_rows`: one row per prompt in verl's RL parquet layout (data_source, prompt, ability, reward_model
  {style: rule, ground_truth}, extra_info); the reward is the judge's, so ground_truth says what to judge
  the completion on (task, preset, dtype, world size) as JSON.

A code judged several times (runs, duplicates) counts once per prompt: its speedup is the median of its
measured ones, and a code that was correct in some judgments and not in others is ambiguous and left out
of pairs.
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from pkb_env.data.reader import DatasetError
from pkb_env.data.schema import MESSAGE
from pkb_env.data.writer import write_table_atomic
from pkb_env.judge.parse import fenced_blocks

FORMATS = ("verl",)
VERL_ABILITY = "multi_gpu_kernels"
VERL_SOURCE = "pkb_env"

SFT_SCHEMA = pa.schema([("messages", pa.list_(MESSAGE)), ("task", pa.string()), ("speedup", pa.float64()),
                        ("roofline_fraction", pa.float64()), ("code_hash", pa.string()), ("agent", pa.string())])
PAIR_SCHEMA = pa.schema([("prompt", pa.list_(MESSAGE)), ("chosen", pa.list_(MESSAGE)), ("rejected", pa.list_(MESSAGE)),
                         ("task", pa.string()), ("chosen_verdict", pa.string()), ("rejected_verdict", pa.string()),
                         ("chosen_speedup", pa.float64()), ("rejected_speedup", pa.float64())])
VERL_SCHEMA = pa.schema([
    ("data_source", pa.string()), ("prompt", pa.list_(MESSAGE)), ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", pa.struct([("split", pa.string()), ("index", pa.int64()), ("task", pa.string()),
                              ("pkb_id", pa.int32()), ("preset", pa.string()), ("dtype", pa.string()),
                              ("world_size", pa.int32()), ("executor", pa.string()), ("config_hash", pa.string()),
                              ("best_speedup", pa.float64()), ("steps", pa.int64())])),
])


@dataclass
class Solution:
    """One distinct code answering one prompt, over every row that judged it."""

    completion: str
    code_hash: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reply(self) -> str:
        """The assistant turn that trains on it (`assistant_reply`)."""
        return assistant_reply(self.completion, self.rows[0].get("code") if self.rows else None)

    @property
    def verdicts(self) -> set[str]:
        return {r["verdict"] for r in self.rows}

    @property
    def correct(self) -> bool:
        return all(r["correct"] for r in self.rows)

    @property
    def failed(self) -> bool:
        return not any(r["correct"] for r in self.rows)

    @property
    def verdict(self) -> str:
        """The worst verdict it got (for a failed one, what it failed with)."""
        from pkb_env.record import Verdict

        return min(self.verdicts, key=lambda v: Verdict(v).rank)

    @property
    def speedup(self) -> float | None:
        return _median(r["speedup"] for r in self.rows)

    @property
    def roofline_fraction(self) -> float | None:
        return _median(r["roofline_fraction"] for r in self.rows)

    def rank_key(self) -> tuple:
        """Best first when sorted descending: measured before unmeasured, then speedup, roofline, judgments."""
        s, f = self.speedup, self.roofline_fraction
        return (s is not None, s or 0.0, f or 0.0, sum(r["count"] for r in self.rows))


@dataclass
class Prompt:
    task: str
    messages: list[dict[str, str]]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def solutions(self) -> list[Solution]:
        """Its distinct codes, best first."""
        by_code: dict[str, Solution] = {}
        for r in self.rows:
            by_code.setdefault(r["code_hash"], Solution(r["completion"], r["code_hash"])).rows.append(r)
        return sorted(by_code.values(), key=Solution.rank_key, reverse=True)


def prompts(rows: Iterable[dict[str, Any]]) -> list[Prompt]:
    """The rows grouped by (task, the exact chat that asked), in the order first seen."""
    groups: dict[tuple[str, str], Prompt] = {}
    for r in rows:
        key = (r["task"], json.dumps(r["prompt"], sort_keys=True))
        groups.setdefault(key, Prompt(r["task"], [dict(m) for m in r["prompt"]])).rows.append(r)
    return list(groups.values())


def sft_rows(rows: Iterable[dict[str, Any]], min_speedup: float = 0.0, top: int = 1,
             as_written: bool = False) -> list[dict[str, Any]]:
    """The best `top` correct solutions of each prompt at speedup >= `min_speedup` (where speed is not
    measured, a correct solution counts only when `min_speedup` <= 0). The reply is the fenced module
    (`assistant_reply`); `as_written` keeps each completion as the model wrote it, for a policy whose action is
    not code (agents/expert_iteration.py --tiny names a program with one token)."""
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a positive integer, got {top!r}")
    out = []
    for prompt in prompts(rows):
        if not prompt.messages:
            continue
        kept = [s for s in prompt.solutions() if s.correct and _fast_enough(s.speedup, min_speedup)][:top]
        for s in kept:
            reply = s.completion if as_written else s.reply
            out.append({"messages": prompt.messages + [{"role": "assistant", "content": reply}],
                        "task": prompt.task, "speedup": s.speedup, "roofline_fraction": s.roofline_fraction,
                        "code_hash": s.code_hash, "agent": s.rows[0]["agent"]})
    return out


def preference_pairs(rows: Iterable[dict[str, Any]], margin: float = 0.05, max_per_prompt: int = 8) -> list[dict[str, Any]]:
    """Chosen/rejected pairs of one prompt each: correct over failed, or over correct and slower by > margin."""
    out = []
    for prompt in prompts(rows):
        if not prompt.messages:
            continue
        solutions = [s for s in prompt.solutions() if s.correct or s.failed]   # mixed verdicts: ambiguous
        chosen = [s for s in solutions if s.correct]
        candidates = []
        for c in chosen:
            for r in solutions:
                if r is c:
                    continue
                if r.failed:
                    candidates.append((0, c, r))
                elif c.speedup is not None and r.speedup is not None and c.speedup > r.speedup * (1 + margin):
                    candidates.append((1, c, r))
        candidates.sort(key=lambda t: (t[0], -(t[1].speedup or 0.0)))   # failures first, fastest chosen first
        for _, c, r in candidates[:max_per_prompt]:
            out.append({"prompt": prompt.messages, "chosen": [{"role": "assistant", "content": c.reply}],
                        "rejected": [{"role": "assistant", "content": r.reply}], "task": prompt.task,
                        "chosen_verdict": c.verdict, "rejected_verdict": r.verdict,
                        "chosen_speedup": c.speedup, "rejected_speedup": r.speedup})
    return out


def verl_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One RL prompt per (task, chat) in verl's layout; the judge scores completions, so no answer is stored."""
    out = []
    for i, prompt in enumerate(p for p in prompts(rows) if p.messages):
        first = prompt.rows[0]
        speedups = [s.speedup for s in prompt.solutions() if s.correct and s.speedup is not None]
        target = {"task": prompt.task, "preset": first["preset"], "dtype": first["dtype"],
                  "world_size": first["world_size"]}
        out.append({
            "data_source": VERL_SOURCE, "prompt": prompt.messages, "ability": VERL_ABILITY,
            "reward_model": {"style": "rule", "ground_truth": json.dumps(target, sort_keys=True)},
            "extra_info": {"split": "train", "index": i, "task": prompt.task, "pkb_id": first["pkb_id"],
                           "preset": first["preset"], "dtype": first["dtype"], "world_size": first["world_size"],
                           "executor": first["executor"], "config_hash": first["config_hash"],
                           "best_speedup": max(speedups) if speedups else None,
                           "steps": sum(r["count"] for r in prompt.rows)},
        })
    return out


def assistant_reply(completion: str, code: str | None) -> str:
    """The reply the system prompt asks for (pkb_env/agents/messages.py: exactly one ```python block holding the
    module): `completion` where it is one already, else `code` (the module the judge ran; None where nothing
    parsed: the completion as it is) in a fence longer than any run of backticks inside it."""
    blocks = fenced_blocks(completion)
    if code is None or (len(blocks) == 1 and blocks[0][0] in ("python", "py") and blocks[0][1].strip() == code.strip()):
        return completion
    ticks = max([3, *(len(run) + 1 for run in re.findall(r"`{3,}", code))])
    return f"{'`' * ticks}python\n{code.rstrip()}\n{'`' * ticks}"


def export_rows(rows: list[dict[str, Any]], format: str) -> tuple[list[dict[str, Any]], pa.Schema]:
    if format == "verl":
        return verl_rows(rows), VERL_SCHEMA
    raise DatasetError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)} "
                       f"(for TRL use `pkb-env data sft` or `pkb-env data pairs`)")


def write_parquet(rows: list[dict[str, Any]], schema: pa.Schema, out: str | os.PathLike) -> Path:
    """Write `rows` as one parquet file: `out` itself if it ends in .parquet, else OUT/train.parquet."""
    out = Path(out)
    path = out if out.suffix == ".parquet" else out / "train.parquet"
    if path.parent.exists() and not path.parent.is_dir():
        raise DatasetError(f"--out {out}: {path.parent} is a file; pass a folder or a .parquet path")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_table_atomic(path, pa.Table.from_pylist(rows, schema=schema))
    return path


def _fast_enough(speedup: float | None, threshold: float) -> bool:
    return threshold <= 0 if speedup is None else speedup >= threshold


def _median(values: Iterable[float | None]) -> float | None:
    measured = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(measured) if measured else None


__all__ = ["sft_rows", "preference_pairs", "verl_rows", "export_rows", "write_parquet", "prompts", "FORMATS",
           "SFT_SCHEMA", "PAIR_SCHEMA", "VERL_SCHEMA"]
