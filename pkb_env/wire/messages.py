"""What a rank may say to the judge: one strict schema per event, checked on every frame.

Candidate code shares its process with the rank server, so it can write to the rank's end of the
channel: every frame the judge reads is a claim, never a fact (docs/threat_model.md). Three rules make
a forged frame stand out:

* every request carries a fresh random nonce, and every answer must echo the nonce of the request it
  answers (a frame written blind, or left over from an earlier request, carries the wrong one);
* every event kind has a schema: exactly these keys, of these types and sizes, with or without a
  binary payload (a header that claims a payload to swallow the next frame, a field the judge does not
  know, a list longer than any honest report is out of schema);
* an event arrives only when the judge asks for it (out of turn: an answer to nothing, a second answer).

`check` raises `ForgedMessage` on any of these; the judge ends the step with an exploit flag. Honest
rank code never sends such a frame, so a violation is evidence, not noise.

The one event a rank sends unasked is `request` (a kernel compile, pkb_env.runtime): candidate code may
send it at any time, it answers nothing, and the compile service validates its body.
"""
from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any, Callable

# A rank's start, in order: its CUDA context (made as the process starts), its rank set's process group
# (NCCL's communicator, its connections, the collectives' kernels), torch's symmetric memory set up (where
# the placement asks for it), the kernels of a step's own requests. The judge asks for them one at a time
# for a held spare (executors/process.py), all at once otherwise; each is answered `started`, the last `ready`.
START_PHASES = ("context", "group", "symmetric", "warm")
# The process-group backend of candidates on emulated ranks (ranks/host_staged.py), named in a rank's spec.
HOST_STAGED = "host_staged"
NONCE_CHARS = 32
MAX_TEXT = 4000        # error messages (the feedback shows a few hundred characters of them)
MAX_MARKS = 4096       # intermediate events of one burst
MAX_NAMES = 64         # aliased or mutated argument paths of one trial


class ForgedMessage(ValueError):
    """A frame that no honest rank sends: out of schema, out of turn, or with another nonce."""


def new_nonce() -> str:
    return secrets.token_hex(NONCE_CHARS // 2)


# -- field checks ----------------------------------------------------------------------------------

def _nonce(v: Any) -> bool:
    return type(v) is str and len(v) == NONCE_CHARS


def _int(v: Any) -> bool:
    return type(v) is int


def _real(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _real_or_none(v: Any) -> bool:
    return v is None or _real(v)


def _flag(v: Any) -> bool:
    return type(v) is bool


def _text(limit: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is str and len(v) <= limit


def _reals(limit: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is list and len(v) <= limit and all(_real(x) for x in v)


def _ints(v: Any) -> bool:
    return type(v) is list and len(v) <= MAX_NAMES and all(type(x) is int for x in v)


def _names(v: Any) -> bool:
    return type(v) is list and len(v) <= MAX_NAMES and all(type(x) is str and len(x) <= 200 for x in v)


def _facts(v: Any) -> bool:
    """Start-up facts of a rank (device name, cache and memory sizes, how its gate works)."""
    return type(v) is dict and len(v) <= 32 and all(
        type(k) is str and len(k) <= 64 and (x is None or type(x) in (str, int, float, bool)) and
        (type(x) is not str or len(x) <= 400) for k, x in v.items())


def _copy_table(v: Any) -> bool:
    return type(v) is list and len(v) <= 4096 and all(
        type(row) is list and len(row) == 3 and _int(row[0]) and _int(row[1]) and _real(row[2]) for row in v)


@dataclass(frozen=True)
class Schema:
    fields: dict[str, Callable[[Any], bool]]
    payload: bool


_ANSWER = {"nonce": _nonce, "rank": _int}
SCHEMAS: dict[str, Schema] = {
    "started": Schema(dict(_ANSWER), payload=False),
    "ready": Schema({**_ANSWER, "facts": _facts}, payload=False),
    "built": Schema({**_ANSWER, "seconds": _real}, payload=False),
    "trial": Schema({**_ANSWER, "index": _int, "seconds": _real, "aliases": _names, "mutated": _names,
                     "shares": _ints, "input_bytes": _int, "output_bytes": _int}, payload=True),
    "gated": Schema(dict(_ANSWER), payload=False),
    "burst": Schema({**_ANSWER, "seen_at": _real, "ended_at": _real, "busy_s": _real, "host_s": _real,
                     "idle_s": _real_or_none, "wait_s": _real_or_none, "marks": _reals(MAX_MARKS)}, payload=False),
    "fingerprints": Schema({**_ANSWER, "burst": _int}, payload=True),
    "copies": Schema({**_ANSWER, "table": _copy_table}, payload=False),
    "error": Schema({**_ANSWER, "phase": _text(200), "message": _text(MAX_TEXT), "tampered": _flag}, payload=False),
}
UNASKED = "request"   # the compile service (see the module docstring)


def check(header: dict[str, Any], has_payload: bool, expected: str, nonce: str, rank: int) -> None:
    """Accept `header` as rank `rank`'s answer (`expected` or an error) to the request `nonce`, or raise."""
    kind = header.get("event")
    if kind == UNASKED:
        if header.get("payload") is not False or has_payload:
            raise ForgedMessage("a service request that claims a payload")
        return
    schema = SCHEMAS.get(kind) if type(kind) is str else None
    if schema is None:
        raise ForgedMessage(f"an event of unknown kind {str(kind)[:40]!r}")
    if kind not in (expected, "error"):
        raise ForgedMessage(f"{kind!r} out of turn (the judge was waiting for {expected!r})")
    keys = set(header) - {"event", "payload"}
    if keys != set(schema.fields):
        extra, missing = sorted(keys - set(schema.fields)), sorted(set(schema.fields) - keys)
        raise ForgedMessage(f"a {kind!r} header with keys out of schema (extra {extra[:5]}, missing {missing[:5]})")
    if header.get("payload") is not schema.payload or has_payload is not schema.payload:
        raise ForgedMessage(f"a {kind!r} header that {'lacks' if schema.payload else 'claims'} a payload")
    for key, ok in schema.fields.items():
        if not ok(header[key]):
            raise ForgedMessage(f"a {kind!r} header whose {key!r} is out of schema")
    if header["nonce"] != nonce:
        raise ForgedMessage(f"a {kind!r} answer to a request the judge did not make (wrong nonce)")
    if header["rank"] != rank:
        raise ForgedMessage(f"a {kind!r} answer signed as rank {header['rank']} on rank {rank}'s channel")
