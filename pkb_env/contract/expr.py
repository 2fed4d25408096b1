"""Size expressions: shapes, bounds and counts written as text over a preset's dims and the world size.

A task declares `("M", "K / W")` rather than a lambda so that the same text is shown in the prompt, checked
against every world size, and evaluated when inputs are made. The language is a small, safe subset of
Python: names (the preset's dims, `W` for the world size, the mesh's dimension names), integer and float
literals, `+ - * / // % **`, unary minus, parentheses and the functions `min`, `max`, `sqrt`, `log2`,
`ceil_div`.

`/` means *exact* division where an integer is needed: `K / W` at K=512, W=3 is an error that says so,
which is how a task's shapes decide the world sizes it takes without a separate list of divisibility
rules. `//` is floor division for the rare shape that rounds on purpose.
"""
from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Mapping, Union


class ExprError(ValueError):
    """An expression that cannot be parsed or evaluated; the message names the expression and the fix."""


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod, ast.Pow: operator.pow}
_FUNCTIONS = {"min": min, "max": max, "sqrt": math.sqrt, "log2": math.log2,
              "ceil_div": lambda a, b: -(-a // b)}


@dataclass(frozen=True)
class Expr:
    """A parsed expression; `str(expr)` is its source text, shown verbatim in prompts."""

    text: str

    def __post_init__(self) -> None:
        _parse(self.text)  # fail at declaration time, not when a rank first makes inputs

    @cached_property
    def names(self) -> frozenset[str]:
        """The names the expression reads (cached: every input set a rank makes asks for them)."""
        return frozenset(n.id for n in ast.walk(_parse(self.text)) if isinstance(n, ast.Name)
                         and n.id not in _FUNCTIONS)

    def integer(self, env: Mapping[str, float]) -> int:
        """The value as an int; `/` must divide exactly and the result must be a whole number."""
        value = _eval(_parse(self.text).body, env, self.text, exact=True)
        if isinstance(value, float):
            if not value.is_integer():
                raise ExprError(f"{self.text} = {value:g} is not a whole number")
            value = int(value)
        return value

    def real(self, env: Mapping[str, float]) -> float:
        """The value as a float (tolerance magnitudes, distribution bounds)."""
        return float(_eval(_parse(self.text).body, env, self.text, exact=False))

    def __str__(self) -> str:
        return self.text


Size = Union[int, float, str, Expr]
"""What a declaration accepts for one size: a literal number, expression text, or a parsed Expr."""


def as_expr(value: Size) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ExprError(f"a size must be a number or an expression string such as 'K / W', got {value!r}")
    return Expr(repr(value) if isinstance(value, float) else str(value))


def show(value: Size) -> str:
    return str(as_expr(value))


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse the size expression {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Name, ast.Load, ast.Constant,
                   ast.Call, ast.Div, *_BINARY)
        if not isinstance(node, allowed):
            raise ExprError(f"{text!r} uses {type(node).__name__}, which size expressions do not allow; use "
                            f"names, numbers, + - * / // % ** and min/max/sqrt/log2/ceil_div")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or
                                               not isinstance(node.value, (int, float))):
            raise ExprError(f"{text!r}: only numbers may appear as literals, got {node.value!r}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                                               and not node.keywords):
            raise ExprError(f"{text!r}: the only functions are {', '.join(sorted(_FUNCTIONS))}")
    return tree


def _eval(node: ast.AST, env: Mapping[str, float], text: str, exact: bool):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"{text!r} names {node.id!r}, which is neither a dim of the preset, W, nor a mesh "
                            f"dimension (known: {', '.join(sorted(env))})")
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text, exact)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](*(_eval(a, env, text, exact) for a in node.args))
    left, right = _eval(node.left, env, text, exact), _eval(node.right, env, text, exact)
    if isinstance(node.op, ast.Div):
        if right == 0:
            raise ExprError(f"{text!r} divides by zero")
        if exact and isinstance(left, int) and isinstance(right, int):
            if left % right:
                raise ExprError(f"{ast.unparse(node)} = {left} / {right} is not a whole number")
            return left // right
        return left / right
    if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
        raise ExprError(f"{text!r} divides by zero")
    return _BINARY[type(node.op)](left, right)
