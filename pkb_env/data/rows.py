"""One dataset row from one judged step: the record, what the model was asked and answered, and where it ran.

Everything a row holds is computed here from plain inputs (an EvaluationRecord, chat messages, the
completion, a JudgeConfig), so that a driver which only receives records (a pool of judges on other
machines) builds the same rows as the process that judged them.
"""
from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Mapping, Sequence

from pkb_env.config import JudgeConfig
from pkb_env.data.schema import COLUMNS, STAGES
from pkb_env.record import EvaluationRecord, jsonable

Message = Mapping[str, str]


def code_hash(code: str | None, completion: str) -> str:
    """sha256 (32 hex) of the extracted code, or of the completion where no code was found."""
    text = code if code is not None else completion
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:32]


def config_json(config: JudgeConfig | None) -> str:
    """The judge config as sorted JSON, without `cache_dir` (where files go, not how steps are judged)."""
    if config is None:
        return "{}"
    data = jsonable(config)
    data.pop("cache_dir", None)
    return json.dumps(data, sort_keys=True)


def config_hash(config: JudgeConfig | None) -> str:
    return hashlib.sha256(config_json(config).encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def _task_facts(name: str) -> tuple[int | None, str]:
    from pkb_env.task import load_task

    try:
        spec = load_task(name)
    except Exception:  # a record of a task this checkout does not have: the row still stands
        return None, ""
    return spec.pkb_id, spec.family


def messages_of(messages: Sequence[Message] | str | None) -> list[dict[str, str]]:
    """Chat messages as [{"role", "content"}]; a bare string is one user message."""
    if messages is None:
        return []
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    out = []
    for m in messages:
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ValueError(f"a prompt message must be a mapping with 'role' and 'content', got {m!r}")
        out.append({"role": str(m["role"]), "content": str(m["content"])})
    return out


def make_row(record: EvaluationRecord, completion: object, messages: Sequence[Message] | str | None, *,
             reward: float, reward_terms: Mapping[str, Any], config: JudgeConfig | None, topology: str | None,
             turn: int = 0, episode_id: str = "", agent: str | None = None, seed: int | None = None,
             run_id: str = "", version: str = "") -> dict[str, Any]:
    """The row of one step (the columns of pkb_env/data/schema.py, `count` 1), not yet redacted."""
    completion = completion if isinstance(completion, str) else repr(completion)
    code = record.parse.code if record.parse is not None else None
    timing = record.timing
    pkb_id, family = _task_facts(record.task)
    row = {
        "run_id": run_id, "episode_id": episode_id, "turn": int(turn),
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "task": record.task, "pkb_id": pkb_id, "family": family, "preset": record.preset, "dtype": record.dtype,
        "world_size": record.world_size, "executor": record.executor, "hardware": record.hardware,
        "topology": topology or "", "performance_available": record.performance_available,
        "prompt": messages_of(messages), "completion": completion, "code": code,
        "code_hash": code_hash(code, completion),
        "verdict": record.verdict.value if record.verdict else None, "stage": record.stage.value,
        "correct": record.correct and not record.exploit_flags, "exploit": bool(record.exploit_flags),
        "error": record.error, "flags": [f"{f.code}: {f.message}" for f in record.flags],
        "speedup": _finite(record.speedup), "roofline_fraction": _finite(record.roofline_fraction),
        "time_s": _finite(timing.time_s) if timing else None,
        "reference_s": _finite(timing.reference_s) if timing else None,
        "reward": float(reward), "reward_terms": terms_of(reward_terms), "feedback": record.feedback,
        "stage_seconds": {name: record.stage_seconds.get(name) for name in STAGES}, "wall_s": float(record.wall_s),
        "agent": agent, "seed": seed, "package_version": version,
        "config_hash": config_hash(config), "judge_config": config_json(config), "count": 1,
        "record": json.dumps(record.to_dict()),
    }
    assert tuple(row) == COLUMNS, "make_row and the schema disagree"
    return row


def terms_of(terms: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A reward's terms as named values: numbers in `value`, anything else (a reason in words) in `text`."""
    out = []
    for name, value in terms.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        out.append({"name": str(name), "value": _finite(float(value)) if number else None,
                    "text": None if number else str(value)})
    return out


def _finite(value: float | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


__all__ = ["make_row", "code_hash", "config_hash", "config_json", "messages_of", "terms_of"]
