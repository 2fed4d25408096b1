"""What a module's `solution` takes: the binding Python keeps for the name, and the reference's parameters.

Both sides read it: the task registry checks that a reference's parameters are the inputs its spec
declares (task.py), and the screen holds a candidate's `solution` to the reference's (judge/screen/).
"""
from __future__ import annotations

import ast


def solution_binding(tree: ast.Module) -> ast.AST | None:
    """The last top-level statement that binds the name `solution` (the one Python keeps)."""
    found = None
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == "solution":
            found = stmt
        elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "solution"
                                                  for t in stmt.targets):
            found = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                and stmt.target.id == "solution" and stmt.value is not None:
            found = stmt
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == "solution" for a in stmt.names):
            found = stmt
    return found


def reference_parameters(reference_source: str) -> list[str]:
    """Positional parameter names of the reference's top-level `def solution` (what the judge passes)."""
    tree = ast.parse(reference_source)
    node = solution_binding(tree)
    if not isinstance(node, ast.FunctionDef):
        raise ValueError("the reference defines no top-level `def solution(...)`; every task's reference.py must")
    return [a.arg for a in node.args.posonlyargs + node.args.args]
