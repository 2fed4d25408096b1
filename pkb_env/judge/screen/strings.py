"""The strings a module builds from what it states, for the screen's checks of text (judge/screen/visitor.py).

CUDA sources, PTX, driver function names and environment variables live in Python strings, and a model can
split them: `"multi" + "mem"`, `f"cuMulti{'cast'}Create"`, `"".join([...])`, `b"..."`, `"...":[::-1]`,
`bytes.fromhex(...)`, a name bound to a string earlier (`A = "multi"` ... `A + "mem"`). `Strings.text(node)` is
the string an expression builds, with every part it cannot know (a parameter, a call's result) left empty, and
whether it knew every part. Names bound to strings are followed per scope (module, class, function; the last
string a name is given in its scope, `+=` appended). Text assembled at run time from what the module does not
state gets past this (so does any AST check): the compile service checks every source it is given again
(judge/compile_checks.py).
"""
from __future__ import annotations

import ast
import base64
import binascii
import re
from dataclasses import dataclass
from typing import Callable

MAX_CHARS = 1 << 20   # a string built past this is cut (names can double a string on every line)
BUDGET = 16 << 20     # characters built and read per module; past it the screen says the module is too large
STRING_METHODS = {"join", "replace", "format", "lower", "upper", "casefold", "strip", "lstrip", "rstrip", "decode",
                  "encode", "removeprefix", "removesuffix", "swapcase", "title", "capitalize"}
DECODERS = {"bytes.fromhex": bytes.fromhex, "builtins.bytes.fromhex": bytes.fromhex,
            "base64.b64decode": base64.b64decode, "base64.b32decode": base64.b32decode,
            "base64.b16decode": base64.b16decode, "base64.b85decode": base64.b85decode,
            "base64.a85decode": base64.a85decode, "base64.urlsafe_b64decode": base64.urlsafe_b64decode,
            "binascii.unhexlify": binascii.unhexlify, "binascii.a2b_hex": binascii.a2b_hex,
            "binascii.a2b_base64": binascii.a2b_base64}


class TooLarge(Exception):
    """The module builds more text from its strings than the screen reads (BUDGET)."""


@dataclass(frozen=True)
class Text:
    value: str
    complete: bool   # every part was known (a literal name, not one computed at run time)


class Strings:
    """Strings bound to names, per scope, and the text of string expressions."""

    def __init__(self, resolve: Callable[[ast.AST], str | None]):
        self._resolve = resolve   # dotted name of a callee ("base64.b64decode"), through the screen's imports
        self._scopes: list[dict[str, Text | None]] = []   # None: bound in the scope, to no string known here
        self.spent = 0   # characters built so far (BUDGET)

    def charge(self, chars: int) -> None:
        self.spent += chars
        if self.spent > BUDGET:
            raise TooLarge(f"the module builds more than {BUDGET >> 20} MB of text from its strings")

    def push(self, body: list[ast.stmt], bound: list[str] | tuple[str, ...] = ()) -> None:
        """Enter a scope: the strings its statements bind, in order (nested functions and classes excluded).
        `bound`: every name the scope binds (parameters included), which hides the outer scopes' strings."""
        scope: dict[str, Text | None] = dict.fromkeys(bound)
        self._scopes.append(scope)
        for stmt in _in_order(body):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = self.text(stmt.value)
                for target in targets:
                    if isinstance(target, ast.Name):
                        scope[target.id] = value
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                value, before = self.text(stmt.value), scope.get(stmt.target.id)
                known = isinstance(stmt.op, ast.Add) and value is not None and before is not None
                scope[stmt.target.id] = _joined([before, value]) if known else None

    def pop(self) -> None:
        self._scopes.pop()

    def name(self, name: str) -> Text | None:
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        return None

    def is_text(self, node: ast.AST) -> bool:
        """Whether `node` builds a string this class reads (without building it)."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (str, bytes))
        if isinstance(node, ast.JoinedStr):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return any(self._known(operand) for operand in _added(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return self._known(node.left)
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Slice) and self._known(node.value)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in STRING_METHODS and self._known(func.value):
                return True
            name = self._resolve(func)
            return name in DECODERS or name == "builtins.chr" or (
                name in ("builtins.bytes", "builtins.bytearray") and bool(node.args) and
                isinstance(node.args[0], (ast.List, ast.Tuple)))
        return False

    def _known(self, node: ast.AST) -> bool:
        return self.is_text(node) or (isinstance(node, ast.Name) and self.name(node.id) is not None)

    def text(self, node: ast.AST) -> Text | None:
        """The string `node` builds (unknown parts empty), or None when it builds none this class reads."""
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if not self.is_text(node):
            return None
        try:
            built = self._text(node)
        except (ValueError, TypeError, UnicodeError, binascii.Error, OverflowError, IndexError, KeyError,
                RecursionError):
            return Text("", False)
        self.charge(len(built.value))
        return built

    def _part(self, node: ast.AST) -> Text:
        """A part of a string: its text, or empty and unknown."""
        found = self.text(node)
        return found if found is not None else Text("", False)

    def _text(self, node: ast.AST) -> Text:
        if isinstance(node, ast.Constant):
            value = node.value
            return Text(value.decode("latin-1") if isinstance(value, bytes) else value, True)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                inner = value.value if isinstance(value, ast.FormattedValue) else value
                part = self._part(inner)
                if isinstance(value, ast.FormattedValue) and (value.format_spec is not None or value.conversion > 0):
                    part = Text(part.value, False)   # padded or repr()'d: the parts are there, the whole may differ
                parts.append(part)
            return _joined(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return _joined([self._part(operand) for operand in _added(node)])
        if isinstance(node, ast.BinOp):   # "%s%s" % (a, b): %s only (a width could build any size)
            form = self._part(node.left)
            items = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            parts = [self._part(item) for item in items]
            pieces = form.value.split("%s")
            if "%" in "".join(pieces).replace("%%", "") or len(pieces) != len(parts) + 1:
                return Text(form.value, False)
            out = [pieces[0]] + [x for part, piece in zip(parts, pieces[1:]) for x in (part.value, piece)]
            return Text("".join(out).replace("%%", "%")[:MAX_CHARS], form.complete and all(p.complete for p in parts))
        if isinstance(node, ast.Subscript):
            base, s = self._part(node.value), node.slice
            bounds = [None if b is None else _int(b) for b in (s.lower, s.upper, s.step)]
            if any(b is False for b in bounds) or bounds[2] == 0:
                return Text(base.value, False)
            return Text(base.value[slice(*bounds)], base.complete)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in STRING_METHODS and self._known(func.value):
            return self._method(func.attr, self._part(func.value), node)
        name = self._resolve(func)
        if name == "builtins.chr":
            code = _int(node.args[0]) if node.args else False
            return Text(chr(code), True) if code is not False else Text("", False)
        if name in ("builtins.bytes", "builtins.bytearray"):
            codes = [_int(e) for e in node.args[0].elts]
            known = [c for c in codes if c is not False]
            return Text(bytes(c % 256 for c in known).decode("latin-1"), len(known) == len(codes))
        data = self._part(node.args[0]) if node.args else Text("", False)
        return Text(DECODERS[name](data.value).decode("latin-1"), data.complete)

    def _method(self, method: str, base: Text, node: ast.Call) -> Text:
        args = [self._part(a) for a in node.args]
        if any(isinstance(a, ast.Starred) for a in node.args) or node.keywords:
            return Text(base.value, False)
        if method == "join":
            items = node.args[0] if node.args else None
            if not isinstance(items, (ast.List, ast.Tuple, ast.Set)):
                return Text("", False)   # a generator or a name: its items are not known here
            parts = [self._part(e) for e in items.elts]
            return Text(base.value.join(p.value for p in parts)[:MAX_CHARS],
                        base.complete and all(p.complete for p in parts))
        complete = base.complete and all(a.complete for a in args)
        if method in ("decode", "encode"):
            return Text(base.value, complete)
        if method == "format":   # "{}{}" and "{0}" only (a width could build any size)
            fields = re.findall(r"\{([^{}]*)\}", base.value)
            if any(f and not f.isdigit() for f in fields) or len(fields) > len(args) and not all(fields):
                return Text(base.value, False)
            return Text(base.value.format(*[a.value for a in args])[:MAX_CHARS], complete)
        if method == "replace":
            if len(args) < 2 or len(args[0].value) == 0:
                return Text(base.value, False)
            return Text(base.value.replace(args[0].value, args[1].value)[:MAX_CHARS], complete)
        return Text(getattr(base.value, method)(*[a.value for a in args]), complete)


def _added(node: ast.BinOp) -> list[ast.AST]:
    """The operands of a + b + c ... in order (a left-nested chain, walked without recursion)."""
    operands: list[ast.AST] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        operands.append(node.right)
        node = node.left
    operands.append(node)
    return operands[::-1]


def _joined(parts: list[Text]) -> Text:
    value = "".join(p.value for p in parts)
    return Text(value[:MAX_CHARS], all(p.complete for p in parts) and len(value) <= MAX_CHARS)


def _int(node: ast.AST | None) -> int | bool:
    """An integer literal (with its sign), else False."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int(node.operand)
        return False if inner is False else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return False


def _in_order(body: list[ast.stmt]):
    """The statements of a scope in source order, inside compound statements too, not inside definitions."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield stmt
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list):
                for item in inner:
                    if isinstance(item, (ast.ExceptHandler, ast.match_case)):
                        yield from _in_order(item.body)
                    elif isinstance(item, ast.stmt):
                        yield from _in_order([item])
