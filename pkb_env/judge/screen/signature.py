"""The screen's first job: a module the judge can call the way it calls the reference, or the fix in words."""
from __future__ import annotations

import ast

from pkb_env.contract.signature import solution_binding
from pkb_env.judge.screen.rules import INFO
from pkb_env.record import Flag


def check_solution(tree: ast.Module, parameters: list[str]) -> tuple[list[str], str | None, list[Flag]]:
    want = f"def solution({', '.join(parameters)})"
    node = solution_binding(tree)
    if node is None:
        return [], f"no top-level `solution` found: define `{want}` at module level, as the reference does", []
    line = node.lineno
    if isinstance(node, ast.AsyncFunctionDef):
        return [], f"line {line}: solution is `async def`; the judge calls it synchronously: use `{want}`", []
    if isinstance(node, ast.ClassDef):
        return [], f"line {line}: solution is a class; the judge calls a function: define `{want}`", []
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [], f"line {line}: solution is imported, not defined here: define `{want}` in the module", []
    if isinstance(node, ast.FunctionDef):
        return _check_signature(node.args, parameters, line, want)

    value = node.value
    note = Flag("solution_assigned", INFO, f"line {line}: solution is assigned, not defined with def", line)
    if isinstance(value, ast.Constant):
        return [], f"line {line}: solution is assigned a constant, not a function: define `{want}`", []
    target = value
    if isinstance(value, ast.Name):  # solution = _impl: check _impl's signature
        target = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == value.id), value)
    if isinstance(target, (ast.Lambda, ast.FunctionDef)):
        params, error, notes = _check_signature(target.args, parameters, line, want)
        return params, error, [note, *notes]
    return list(parameters), None, [note]


def _check_signature(args: ast.arguments, parameters: list[str], line: int,
                     want: str) -> tuple[list[str], str | None, list[Flag]]:
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = len(positional) - len(args.defaults)
    n = len(parameters)
    if required > n:
        return positional, (f"line {line}: solution requires {required} positional parameters "
                            f"({', '.join(positional[:required])}) but the judge passes {n}, as to the "
                            f"reference: use `{want}`"), []
    if len(positional) < n and args.vararg is None:
        return positional, (f"line {line}: solution takes {len(positional)} positional parameter(s) but the "
                            f"judge passes {n}: use `{want}`"), []
    keyword_only = [a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults) if default is None]
    if keyword_only:
        return positional, (f"line {line}: solution requires keyword-only parameter(s) {', '.join(keyword_only)} "
                            f"that the judge never passes: give them defaults or use `{want}`"), []
    shown = positional[:n]
    if shown != list(parameters[:len(shown)]):
        return positional, None, [Flag("parameter_names", INFO,
                                       f"line {line}: solution's parameters ({', '.join(shown)}) are named unlike "
                                       f"the reference's ({', '.join(parameters)}); the judge passes them by "
                                       f"position", line)]
    return positional, None, []


def syntax_error(exc: SyntaxError) -> str:
    where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
    text = (exc.text or "").strip()
    shown = f": `{text[:120]}`" if text else ""
    return f"syntax error at {where}: {exc.msg}{shown}; fix it so that the module compiles"
