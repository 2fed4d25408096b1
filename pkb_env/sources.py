"""C, C++, CUDA and PTX sources read as text, by the judge and by the ranks alike: comments blanked
(`without_comments`), and what in a source asks for NVLink multicast (NVLS: `multicast_use`).

NVLink multicast never runs on the machines we judge on: it can put a shared host's GPUs out of service, and
model-written kernels ask for it (99 of PKB's 383 published solutions: multimem PTX, cuMulticast*, a symmetric
buffer's multicast pointer, ThunderKittens' multicast barriers; docs/measurements/2026-12-05-multicast-screen-cpu.md). Every process the judge starts keeps it off
(sandbox/variables.py MULTICAST_OFF); a candidate that asks anyway is refused before anything runs:
  * the static screen (judge/screen/) flags these in every string of the module (CUDA sources, PTX, driver
    function names, environment variables live in Python strings), and the names it reaches;
  * the compile service (judge/compile_checks.py) refuses any source holding them, whoever assembled it;
  * the compilers a rank can call itself (ranks/compilers.py) refuse them too.
The patterns are matched case-insensitively. Not on the list: TMA's `.multicast::cluster` (copies inside one
GPU's thread-block cluster, nothing to do with NVLink) and queries such as `has_multicast_support` (they
answer False here).
"""
from __future__ import annotations

import re

# (what, pattern): `what` is what the refusal names.
MULTICAST_TEXT = [
    ("multimem (PTX instructions or multimem operations)", r"multimem"),
    ("a driver multicast object (cuMulticast*)",
     r"cu(?:da)?_?multicast|multicast_?(?:create|add_?device|bind|unbind|get_?granularity|object)"),
    ("a multicast pointer (multicast_ptr, mc_ptr)", r"mc_?ptr|multicast_?ptr"),
    ("an NVLS switch", r"nvls|disable_?multicast"),
    ("ThunderKittens' multicast barrier or PGL", r"\bbarrier_t\s*<|\bpgl\s*<[^;]*?,\s*true\s*>"),
    ("a driver symbol lookup (cuGetProcAddress, cudaGetDriverEntryPoint)",
     r"get_?proc_?address|get_?driver_?entry_?point"),
]
PATTERN = re.compile("|".join(f"(?P<m{i}>{pattern})" for i, (_, pattern) in enumerate(MULTICAST_TEXT)),
                     re.IGNORECASE)
MULTICAST_FIX = ("NVLink multicast/NVLS is off on this machine: multimem PTX, cuMulticast*, a symmetric buffer's "
                 "multicast pointer, NVLS switches and driver symbol lookups are refused; use peer loads/stores "
                 "(symmetric_buffer(...).ptrs) or the copy engine (buf.peer(r).copy_)")
# Adjacent string literals ("cuMulti" "castCreate") and token pasting (cuMulti##castCreate) are one name to C.
_ADJACENT = re.compile(r'"\s*(?:u8|[uUL])?"')
_PASTE = re.compile(r"\s*##\s*")
# Every pattern holds one of these (lower case): text without any is passed over at str.find's speed (the
# compile service checks every request, cached or not: docs/measurements/2026-12-05-multicast-screen-cpu.md).
_ANCHORS = ("multimem", "multicast", "mc_ptr", "mcptr", "nvls", "barrier_t", "pgl", "procaddress", "proc_address",
            "entrypoint", "entry_point")


def multicast_use(text: str) -> tuple[str, str] | None:
    """(what, the text around it) for the first thing in `text` that asks for multicast, else None."""
    if '"' in text:
        text = _ADJACENT.sub("", text)
    if "##" in text:
        text = _PASTE.sub("", text)
    lower = text.lower()
    if not any(anchor in lower for anchor in _ANCHORS):
        return None
    found = PATTERN.search(text)
    if found is None:
        return None
    what = MULTICAST_TEXT[int(found.lastgroup[1:])][0]
    start, end = max(0, found.start() - 12), min(len(text), found.end() + 12)
    return what, " ".join(text[start:end].split())


RAW_STRING = re.compile(r'(?:u8|[uUL])?R"([^()\\\s]{0,16})\(')   # R"delim( and its encoding prefixes
# Where something other than plain code may begin: a comment, a string or character literal, a raw string.
_LEXEME = re.compile(r'//|/\*|["\']|(?:u8|[uUL])?R"')


def without_comments(source: str) -> str:
    """`source` with comments blanked (newlines kept), strings and raw strings left as they are.

    Plain code between two lexemes is copied in one slice: a scan character by character cost a candidate's
    every compile request milliseconds, cached or not (docs/measurements/2026-12-03-timing-h200.md, "A
    candidate's first call")."""
    out, i, n = [], 0, len(source)
    while i < n:
        found = _LEXEME.search(source, i)
        if found is None:
            out.append(source[i:])
            break
        at, token = found.start(), found.group()
        out.append(source[i:at])
        if token == "//":
            end = source.find("\n", at)
            i = n if end < 0 else end
        elif token == "/*":
            end = source.find("*/", at + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * source.count("\n", at, end) or " ")
            i = end
        elif token[-1] == '"' and len(token) > 1:   # R" with its prefix: a raw string where it starts a token
            raw = RAW_STRING.match(source, at)
            if raw and (at == 0 or not (source[at - 1].isalnum() or source[at - 1] == "_")):
                end = source.find(")" + raw.group(1) + '"', raw.end())
                end = n if end < 0 else end + len(raw.group(1)) + 2
                out.append(source[at:end])
                i = end
            else:                                    # part of a name: the quote starts an ordinary string
                out.append(token[:-1])
                i = found.end() - 1
        else:                                        # a string or character literal, to its end or the line's
            j = at + 1
            while j < n and source[j] not in (token, "\n"):
                j += 2 if source[j] == "\\" else 1
            out.append(source[at:j + 1])
            i = j + 1
    return "".join(out)
