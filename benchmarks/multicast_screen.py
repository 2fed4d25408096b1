"""Which of PKB's published solutions ask for NVLink multicast, and does pkb-env refuse every one before it runs?

    python benchmarks/multicast_screen.py PKB_CHECKOUT [--json out.json] [--files]

PKB_CHECKOUT is a folder holding PKB's solution folders (`solutions_*`, searched to any depth): they were
deleted from ParallelKernelBench's history, so extract them at each deleting commit's parent, outside this
repository (PKB's files never enter it), e.g.
    git clone https://github.com/togethercomputer/ParallelKernelBench pkb && mkdir /tmp/pkb_corpus
    for c in d4b4565:solutions_cuda_bf16_h100_8_openai_gpt-5.5 \\
             7d5da89:solutions_cuda_bf16_h100_8_anthropic_claude-opus-4-7 \\
             842ab32:solutions_cuda_bf16_h100_8_google_gemini-3-pro-preview \\
             2fa1fb6:solutions_triton_bf16_h100_8_google_gemini-3-pro-preview \\
             e2b5d66:solutions_parallelkittens_bf16_h100_8_google_gemini-3-pro-preview; do
        git -C pkb archive "${c%%:*}^" "${c#*:}" | tar -x -C /tmp/pkb_corpus; done
    python benchmarks/multicast_screen.py /tmp/pkb_corpus

Every solution file is a Python module (ParallelKittens' too: ThunderKittens C++/CUDA in Python strings, built
with PKB's compile_cuda_extension). For each file:
  mention   the file names multicast anywhere, comments and docstrings included: `multimem`, `multicast`,
            `mc_ptr` or `nvls`, case ignored, not counting `multicast=False` (ThunderKittens' unicast tensors)
            and TMA's `.multicast::cluster`
  asks      the yardstick the refusals are held against, independent of the screen's table: the file names
            multicast as above outside its docstrings and `#` comments (in its code and its CUDA strings), or
            makes a multicast object through PKB's ParallelKittens helpers (utils/parallelkittens_runtime.py:
            `get_or_create_barrier` always does; `create_parallel_tensor` and `get_or_create_parallel_tensor`
            unless given `multicast=False`)
  screen    the static screen (judge/screen) flags `multicast` (EXPLOIT): the step would end before anything
            of the file runs; `rule` is what its first such flag names
  compile   the compile service (judge/compile_checks.py) would refuse at least one of the file's sources (the
            string constants holding CUDA: `__global__`, `#include` or `asm`), were it asked to build them
Columns `missed` (asks, not refused by the screen) and `extra` (refused, does not ask) list their files below
(--files lists every file).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import io
import sys
import time
import tokenize
from collections import Counter
from pathlib import Path

from pkb_env.contract.signature import reference_parameters
from pkb_env.judge.compile_checks import CompileRefused, check_sources
from pkb_env.sources import MULTICAST_TEXT
from pkb_env.judge.screen import screen_source
from pkb_env.record import Severity

MENTIONS = re.compile(r"multimem|multicast|mc_ptr|nvls", re.IGNORECASE)
NOT_A_MENTION = re.compile(r"multicast\s*=\s*False|\.multicast::cluster", re.IGNORECASE)
CUDA_SOURCE = re.compile(r"__global__|#\s*include|\basm\b")


PK_BARRIER = {"get_or_create_barrier"}
PK_TENSOR = {"create_parallel_tensor", "get_or_create_parallel_tensor"}


def mentions_multicast(text: str) -> bool:
    return bool(MENTIONS.search(NOT_A_MENTION.sub("", text)))


def without_docs(text: str, tree: ast.AST) -> str:
    """The file's tokens but its docstrings (bare string statements) and `#` comments."""
    docs = {(n.value.lineno, n.value.col_offset) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    kept = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type != tokenize.COMMENT and not (t.type == tokenize.STRING and t.start in docs)]
    return " ".join(kept)


def makes_pk_multicast(tree: ast.AST) -> bool:
    """A call of PKB's ParallelKittens helpers that makes a multicast object (their defaults: multicast=True)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        unicast = any(k.arg == "multicast" and isinstance(k.value, ast.Constant) and k.value.value is False
                      for k in node.keywords)
        if name in PK_BARRIER or (name in PK_TENSOR and not unicast):
            return True
    return False


def rule_of(message: str) -> str:
    """The screen's reason, from its flag's message: the table's `what`, or the Python route it named."""
    for what, _ in MULTICAST_TEXT:
        if what in message:
            return what
    if " loads " in message or "driver's library" in message:
        return "the CUDA driver through ctypes"
    if "environment" in message:
        return "an environment switch"
    return message.split(": ", 1)[-1][:60]


def cuda_sources(tree: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and CUDA_SOURCE.search(n.value)]


def examine(path: Path) -> dict:
    text = path.read_text(errors="replace")
    try:
        tree = ast.parse(text)
    except SyntaxError:   # unparsable: the screen ends the step with a syntax error; the broad test stands in
        tree = None
    asks = mentions_multicast(text) if tree is None else \
        mentions_multicast(without_docs(text, tree)) or makes_pk_multicast(tree)
    row = {"file": path.name, "mentions": mentions_multicast(text), "asks": asks, "screen": False, "rule": None,
           "other_exploits": [], "screen_error": None, "compile": None, "compile_reason": None}
    try:
        parameters = reference_parameters(text)
    except (ValueError, SyntaxError):
        parameters = []
    started = time.process_time()   # CPU time: the 2-core machine's load moves wall time 2x between runs
    result = screen_source(text, parameters)
    row["screen_s"] = time.process_time() - started
    row["screen_error"] = result.error
    row["unparsable"] = tree is None
    exploits = [f for f in result.flags if f.severity is Severity.EXPLOIT]
    multicast = [f for f in exploits if f.code == "multicast"]
    row["screen"] = bool(multicast)
    row["rule"] = rule_of(multicast[0].message) if multicast else None
    row["other_exploits"] = sorted({f.code for f in exploits if f.code != "multicast"})
    sources = cuda_sources(tree) if tree is not None else []
    refusals = []
    for i, source in enumerate(sources):
        try:
            check_sources([(f"source {i}", source)])
        except CompileRefused as exc:
            refusals.append(str(exc))
    row["compile"] = None if not sources else any("NVLink multicast" in r for r in refusals)
    row["compile_reason"] = next((r.split(" refused", 1)[0] for r in refusals if "NVLink multicast" in r), None)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="a folder holding PKB's solutions_* folders")
    parser.add_argument("--json", type=Path, help="write every file's row here")
    parser.add_argument("--files", action="store_true", help="list every file, not only the exceptions")
    args = parser.parse_args()
    folders = sorted({p for p in args.checkout.rglob("solutions_*") if p.is_dir()})
    if not folders:
        print(f"no solutions_* folder under {args.checkout}: see this script's docstring", file=sys.stderr)
        return 2
    rows: dict[str, list[dict]] = {}
    for folder in folders:
        rows[folder.name] = [examine(p) for p in sorted(folder.rglob("*.py"))]

    header = (f"{'folder':<66} {'files':>5} {'mention':>7} {'asks':>5} {'screen':>6} {'both':>5} {'missed':>6} "
              f"{'extra':>5} {'compile':>7} {'syntax':>6}")
    print(header)
    print("-" * len(header))
    totals = Counter()
    rules = Counter()
    exceptions = []
    for name, found in rows.items():
        counts = Counter(files=len(found), mention=sum(r["mentions"] for r in found),
                         asks=sum(r["asks"] for r in found), screen=sum(r["screen"] for r in found),
                         both=sum(r["asks"] and r["screen"] for r in found),
                         missed=sum(r["asks"] and not r["screen"] and not r["unparsable"] for r in found),
                         unparsable=sum(r["unparsable"] for r in found),
                         extra=sum(r["screen"] and not r["asks"] for r in found),
                         compile=sum(bool(r["compile"]) for r in found))
        totals.update(counts)
        rules.update(r["rule"] for r in found if r["rule"])
        print(f"{name:<66} {counts['files']:>5} {counts['mention']:>7} {counts['asks']:>5} {counts['screen']:>6} "
              f"{counts['both']:>5} {counts['missed']:>6} {counts['extra']:>5} {counts['compile']:>7} "
              f"{counts['unparsable']:>6}")
        for r in found:
            if args.files or r["asks"] != r["screen"] or r["unparsable"]:
                exceptions.append((name, r))
    print("-" * len(header))
    print(f"{'all':<66} {totals['files']:>5} {totals['mention']:>7} {totals['asks']:>5} {totals['screen']:>6} "
          f"{totals['both']:>5} {totals['missed']:>6} {totals['extra']:>5} {totals['compile']:>7} "
          f"{totals['unparsable']:>6}")
    print("\ncolumns (this script's docstring): mention = names multicast anywhere; asks = names it outside docstrings"
          "\nand comments, or makes a multicast object through PKB's ParallelKittens helpers; screen = refused by the"
          "\nscreen (flag multicast); both = asks and refused; missed = asks, not refused; extra = refused, does not"
          "\nask; compile = the compile service would refuse one of its CUDA sources; syntax = unparsable (the screen"
          "\nends the step with the syntax error: nothing runs; not counted as missed)")
    print("\nscreen refusals by rule (the first multicast flag of each file):")
    for rule, count in rules.most_common():
        print(f"  {count:>4}  {rule}")
    seconds = [r["screen_s"] for found in rows.values() for r in found]
    print(f"\nscreen CPU time per file: median {sorted(seconds)[len(seconds) // 2] * 1e3:.1f} ms, "
          f"max {max(seconds) * 1e3:.1f} ms ({len(seconds)} files)")
    other = Counter(code for found in rows.values() for r in found for code in r["other_exploits"])
    print("other EXPLOIT flags on these files (not multicast): " +
          (", ".join(f"{code} x{n}" for code, n in other.most_common()) or "none"))
    docs_only = [f"{n}/{r['file']}" for n, found in rows.items() for r in found if r["mentions"] and not r["asks"]]
    helpers_only = [r for found in rows.values() for r in found if r["asks"] and not r["mentions"]]
    print(f"\nnamed only in docstrings or comments (not asked for): {len(docs_only)}" +
          "".join(f"\n  {f}" for f in docs_only))
    print(f"asked for through PKB's ParallelKittens helpers without naming multicast: {len(helpers_only)}")
    if exceptions:
        every = " (and every file)" if args.files else ""
        print(f"\nfiles where asks and screen disagree, or unparsable{every}:")
        for name, r in exceptions:
            print(f"  {name}/{r['file']}: mention={r['mentions']} asks={r['asks']} screen={r['screen']} "
                  f"rule={r['rule']} compile={r['compile']}" + (f" UNPARSABLE ({r['screen_error'][:60]})"
                                                                  if r["unparsable"] else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
