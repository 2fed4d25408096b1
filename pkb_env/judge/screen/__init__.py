"""Screen: a static look at the candidate module before anything of it runs (docs/architecture.md,
"What a candidate cannot do, and why").

Two jobs. First, reject modules that cannot be judged, with the fix in the message: syntax errors, no
top-level `solution`, `async def`, a signature the judge cannot call the way it calls the reference.
Second, report what the code does that matters to a judge, as `Flag`s: EXPLOIT flags for attempts on the
judge (monkeypatching timers or torch, scanning memory with gc/ctypes//proc, killing processes, tracing,
importing the judge or the reference, collectives a task forbids), for NVLink multicast (`multicast`:
multimem PTX, cuMulticast*, a symmetric buffer's multicast pointer, NVLS switches, the CUDA driver reached
through ctypes or a symbol lookup; pkb_env/sources.py), and for code loaded from files (`load_from_file`:
importlib's file loaders, runpy, imp, zipimport, pkgutil, importlib.resources, sys.path writes; an expert
solution read from disk is an answer key); and INFO flags for things worth knowing that are legitimate
(threads, broad `except`, NCCL collectives, environment reads, file access, math-mode switches). Only
EXPLOIT flags cost reward; INFO flags are feedback and logging.

The screen is one layer, not the sandbox: code built at run time (exec, getattr with computed names) gets
past any AST check, so the runtime defences (separate processes, judge-owned channel, fresh secret
inputs, verified timed calls) stay the ones that hold. The screen's job is to catch the common, cheap
tricks early and to never penalise ordinary kernel code. Hence names are resolved through imports and
simple aliases (`import torch.distributed as dist`, `from time import perf_counter`, `E = torch.cuda.Event`)
per scope, and a local that shadows a module name (`time = t1 - t0`) is not that module. Strings are read
whole: what an expression builds from the module's own strings (concatenations, f-strings, joins, names bound
to strings, bytes, slices, hex and base64; screen/strings.py), with C and PTX comments inside them left out.
"""
from __future__ import annotations

import ast

from pkb_env.judge.screen.signature import check_solution, syntax_error
from pkb_env.judge.screen.strings import TooLarge
from pkb_env.judge.screen.visitor import Screen
from pkb_env.record import ScreenResult

__all__ = ["screen_source"]


def screen_source(code: str, parameters: list[str], collectives_allowed: bool = True) -> ScreenResult:
    """Flags for `code`, its `solution`'s parameter names, and an error when it cannot be judged."""
    result = ScreenResult()
    try:
        tree = ast.parse(code, filename="solution.py")
    except SyntaxError as exc:
        result.error = syntax_error(exc)
        return result
    except (ValueError, RecursionError, MemoryError) as exc:
        result.error = f"the module cannot be parsed ({type(exc).__name__}: {exc}): send plain Python source"
        return result

    screen = Screen(collectives_allowed)
    try:
        screen.visit(tree)
    except RecursionError:
        result.error = "the module nests too deeply to screen: flatten the code"
    except TooLarge as exc:
        result.error = f"{exc}: too much to screen; keep kernel sources to what they need"
    result.flags = screen.flags
    params, error, notes = check_solution(tree, parameters)
    result.parameters = params
    result.flags.extend(notes)
    result.error = result.error or error
    return result
