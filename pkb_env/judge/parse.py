"""Parse: turn an action (a raw model completion, or bare code) into the candidate module's source.

The first stage of a step, and the one garbage meets first, so it must be cheap and total: every input,
whatever its type or size, yields a `ParseResult`, either with `code` or with an `error` that names the
problem and the fix. Nothing here judges the code; `screen` does that.

Code extraction is deliberately plain. Models wrap the module in markdown fences, often more than once
(a draft, then a revision; a shell snippet; a CUDA listing for show), and sometimes forget to close the
last fence. The rule: among the fenced blocks tagged python/py (or untagged), take the last one that
defines `solution`; failing that, the last Python block; with no fence at all, the whole text is the code.
A text that already is a valid module defining `solution` is taken whole even if a docstring inside it
shows a fence, so a fence inside the code never hides the code.
"""
from __future__ import annotations

import ast
import re
import textwrap

from pkb_env.config import JudgeConfig
from pkb_env.record import ParseResult

# An opening fence: up to any indentation, three or more backticks or tildes, then an optional info
# string whose first word is the language tag. Backtick fences cannot carry backticks in the info string.
_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*)$")
_PYTHON_TAGS = {"", "python", "py", "python3", "py3", "ipython", "python-repl"}
_DEFINES_SOLUTION = re.compile(r"^(?:async[ \t]+)?def[ \t]+solution\b|^solution[ \t]*(?::[^=\n]*)?=(?!=)",
                               re.MULTILINE)


def parse_action(action: object, max_chars: int = JudgeConfig.max_action_chars) -> ParseResult:
    """The candidate's source from `action` (str, or UTF-8 bytes); `error` says why there is none."""
    if isinstance(action, (bytes, bytearray, memoryview)):
        raw = bytes(action)
        if len(raw) > 4 * max_chars:  # no UTF-8 text of max_chars characters is longer than this
            return _fail(len(raw), f"action is {len(raw):,} bytes; the limit is {max_chars:,} characters: "
                                   f"send only the module")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _fail(len(raw), f"action bytes are not valid UTF-8 (byte {exc.start}: {exc.reason}): "
                                   f"send the code as a str or as UTF-8 bytes")
    elif isinstance(action, str):
        text = action
    else:
        return _fail(0, f"action must be a str holding the model's completion, got {type(action).__name__}: "
                        f"pass the generated text itself")

    chars = len(text)
    if chars > max_chars:
        return _fail(chars, f"action is {chars:,} characters; the limit is {max_chars:,}: send only the module")
    if "\x00" in text:
        return _fail(chars, f"action contains a NUL character (at offset {text.index(chr(0)):,}): "
                            f"send plain source text")
    if not text.strip():
        return _fail(chars, "action is empty: send a Python module that defines solution(...)")

    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    note = _replacement_note(text)
    if _is_module(text):
        return ParseResult(code=text, action_chars=chars, from_fence=False, note=note)
    blocks = fenced_blocks(text)
    if not blocks:
        return ParseResult(code=text, action_chars=chars, from_fence=False, note=note)

    python = [body for tag, body in blocks if tag in _PYTHON_TAGS]
    defining = [body for body in python if _DEFINES_SOLUTION.search(body)]
    if not defining:  # a mislabelled block (```cuda around the Python module) still counts if it defines it
        defining = [body for _, body in blocks if _DEFINES_SOLUTION.search(body)]
    chosen = (defining or python or [None])[-1]
    if chosen is None:
        tags = sorted({tag for tag, _ in blocks})
        return _fail(chars, f"found {len(blocks)} fenced block(s) tagged {', '.join(tags)} but none holds "
                            f"Python: put the module in a ```python block")
    if not chosen.strip():
        return _fail(chars, "the ```python block is empty: put the module that defines solution(...) in it")
    return ParseResult(code=chosen, action_chars=chars, from_fence=True, note=_replacement_note(chosen))


def _replacement_note(text: str) -> str | None:
    """Say so when the text holds U+FFFD: bytes that were not UTF-8 were replaced on the way (a file read with
    errors="replace", a decoder upstream), so the code judged is not byte for byte what was written."""
    count = text.count("\ufffd")
    if not count:
        return None
    line = text.count("\n", 0, text.index("\ufffd")) + 1
    return (f"the code holds {count} U+FFFD replacement character(s), the first on line {line}: bytes that were "
            f"not valid UTF-8 were replaced before judging; write the source as UTF-8")


def _fail(chars: int, error: str) -> ParseResult:
    return ParseResult(code=None, action_chars=chars, from_fence=False, error=error)


def _is_module(text: str) -> bool:
    """Whether the whole text is Python that defines `solution` (then fences in it are its own strings)."""
    if not _DEFINES_SOLUTION.search(text):
        return False
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block in order; an unclosed last fence runs to the end."""
    lines = text.split("\n")
    blocks: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if not match or (match["fence"][0] == "`" and "`" in match["info"]):
            i += 1
            continue
        fence, info = match["fence"], match["info"].strip()
        tag = info.split()[0].strip("{}.").lower() if info else ""
        body: list[str] = []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                break
            body.append(lines[i])
            i += 1
        i += 1  # past the closing fence (or the end)
        blocks.append((tag, textwrap.dedent("\n".join(body)).strip("\n") + "\n"))
    return blocks
