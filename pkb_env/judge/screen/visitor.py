"""The screen's second job: one walk over the module that resolves names through imports and simple aliases per
scope and reports what matters to a judge as Flags (judge/screen/__init__.py says which are exploits)."""
from __future__ import annotations

import ast
from typing import Iterable

from pkb_env.sources import without_comments
from pkb_env.judge.screen.rules import (ANSWER_KEY_PATHS, BUILTIN_NAMES, COLLECTIVES, CTYPES_MEMORY, DRIVER_HANDLES,
                                         DRIVER_LIBRARY, DRIVER_MODULES, DYNAMIC_CODE, ENV_ALL, ENV_KEYED, ENV_MAPPING,
                                         ENV_READ, ENV_WRITE, EXPLOIT, FRAME_ATTRS, FRAMES, GC_SCAN, IMPORT_PATH_WRITES,
                                         IMPORT_PATHS, IMPORTERS, INFO, INTROSPECTION_ATTRS, KILL, LIBC_ENV,
                                         LIBRARY_HANDLES, LIBRARY_LOADERS, LOAD_FROM_FILE, LOAD_FROM_FILE_FIX,
                                         LOAD_FROM_FILE_MODULES, MATH_MODE, MAX_FLAGS, MODULE_FILE_ATTRS, MULTICAST_FIX,
                                         OPEN, PROC_PATHS, PROCESS_MODULES, PROTECTED, SETATTR, SUBPROCESS,
                                         SYS_MODULES_WRITE, SYSTEM_MODULES, THREAD_MODULES, TIMER_ATTRS, TRACING,
                                         multicast_use)
from pkb_env.judge.screen.strings import Strings, Text
from pkb_env.record import Flag, Severity

LOADER_PREFIXES = tuple(m + "." for m in LOAD_FROM_FILE_MODULES)

class Screen(ast.NodeVisitor):
    """Walks the module once, resolving names through a stack of scopes, and collects flags."""

    def __init__(self, collectives_allowed: bool):
        self.collectives_allowed = collectives_allowed
        self.flags: list[Flag] = []
        self._seen: set[tuple] = set()
        self._scopes: list[dict[str, str | None]] = []
        self.strings = Strings(self._dotted)   # the strings names are bound to, per scope (strings.py)

    # ---- scopes and name resolution
    def _enter(self, body: list[ast.stmt], params: Iterable[str] = ()) -> None:
        """Push the names bound in `body` (not nested scopes): imports map to modules, others shadow."""
        names: dict[str, str | None] = {p: None for p in params}
        imports: dict[str, str] = {}
        aliases: list[tuple[int, str, ast.expr]] = []
        declared: set[str] = set()
        stack: list[ast.AST] = list(body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = None
                continue
            if isinstance(node, ast.Lambda):
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    root = a.name.split(".")[0]
                    imports[a.asname or root] = a.name if a.asname else root
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name == "*":
                        continue
                    if node.level == 0 and node.module:
                        imports[a.asname or a.name] = f"{node.module}.{a.name}"
                    else:
                        names[a.asname or a.name] = None
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                declared.update(node.names)
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                names[node.id] = None
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names[node.name] = None
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, (ast.Name, ast.Attribute, ast.Call)):
                aliases.append((node.lineno, node.targets[0].id, node.value))
            stack.extend(ast.iter_child_nodes(node))
        scope: dict[str, str | None] = {**names, **imports}
        for name in declared:
            scope.pop(name, None)
        self._scopes.append(scope)
        for _, name, value in sorted(aliases, key=lambda item: item[0]):
            if name not in imports:
                resolved = self._dotted(value)
                if resolved and not resolved.startswith("builtins."):
                    scope[name] = resolved
        self.strings.push(body, list(names) + list(imports))   # every name bound here hides outer strings

    def _leave(self) -> None:
        self._scopes.pop()
        self.strings.pop()

    def _lookup(self, name: str) -> str | None:
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        if name == "__builtins__":
            return "builtins"
        return f"builtins.{name}" if name in BUILTIN_NAMES else None

    def _dotted(self, node: ast.AST, calls: bool = False, subscripts: bool = False) -> str | None:
        """`dist.all_reduce` -> "torch.distributed.all_reduce"; None when the root is not a known module."""
        if isinstance(node, ast.Name):
            return self._lookup(node.id)
        if isinstance(node, ast.Attribute):
            if node.attr == "__class__" and isinstance(node.value, ast.Call):  # Event().__class__ is Event
                return self._dotted(node.value.func)
            base = self._dotted(node.value, calls, subscripts)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript) and subscripts:
            base = self._dotted(node.value, calls, subscripts)
            return f"{base}[]" if base else None
        if isinstance(node, ast.Call):
            func = self._dotted(node.func)
            first = _const_str(node.args[0]) if node.args else None
            if func in IMPORTERS and first:
                from_list = len(node.args) >= 4 or any(k.arg == "fromlist" for k in node.keywords)
                return first if func != "builtins.__import__" or from_list else first.split(".")[0]
            if func == "builtins.type" and len(node.args) == 1 and isinstance(node.args[0], ast.Call):
                return self._dotted(node.args[0].func)  # type(Event()) is Event
            if func == "builtins.getattr" and len(node.args) >= 2 and _const_str(node.args[1]):
                base = self._dotted(node.args[0], calls, subscripts)
                return f"{base}.{_const_str(node.args[1])}" if base else None
            if calls:
                base = self._dotted(node.func, calls, subscripts)
                return f"{base}()" if base else None
        return None

    # ---- reporting
    def _flag(self, code: str, severity: Severity, node: ast.AST, text: str, subject: str | None = None,
              line: int | None = None) -> None:
        line = line or getattr(node, "lineno", None)
        key = (code, subject or text) if severity is INFO else (code, line, text)
        if key in self._seen or len(self.flags) >= MAX_FLAGS:
            return
        self._seen.add(key)
        self.flags.append(Flag(code, severity, f"line {line}: {text}", line))

    # ---- scopes
    def visit_Module(self, node: ast.Module) -> None:
        self._enter(node.body)
        self.generic_visit(node)
        self._leave()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for child in [*node.decorator_list, node.args, *( [node.returns] if node.returns else [])]:
            self.visit(child)
        a = node.args
        params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + \
                 [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        self._enter(node.body, params)
        for stmt in node.body:
            self.visit(stmt)
        self._leave()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for child in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(child)
        self._enter(node.body)
        for stmt in node.body:
            self.visit(stmt)
        self._leave()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        a = node.args
        params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        self._scopes.append(dict.fromkeys(params))
        self.strings.push([], params)
        self.visit(node.body)
        self._leave()

    # ---- imports
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(a.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self._flag("judge_import", EXPLOIT, node, "relative import (the candidate is a single module; "
                                                      "a relative import reaches into the judge's package)")
            return
        for a in node.names:
            self._check_module(node.module if a.name == "*" else f"{node.module}.{a.name}", node)

    def _check_module(self, name: str, node: ast.AST) -> None:
        parts = name.split(".")
        self._check_name(name, node, "imports")
        if name in LOAD_FROM_FILE or name in LOAD_FROM_FILE_MODULES or name.startswith(LOADER_PREFIXES):
            self._flag("load_from_file", EXPLOIT, node, f"imports {name}: {LOAD_FROM_FILE_FIX}")
        if parts[0] == "tasks" or parts[:2] == ["pkb_env", "tasks"] or "reference" in parts:
            self._flag("reference_import", EXPLOIT, node, f"imports {name} (importing the task's reference "
                                                          f"or spec is not allowed: write the code yourself)")
        elif parts[0] == "pkb_env" and parts[1:2] != ["runtime"]:
            self._flag("judge_import", EXPLOIT, node, f"imports {name} (only pkb_env.runtime is open to candidates)")
        elif parts[0] == "psutil":
            self._flag("process_control", EXPLOIT, node, "imports psutil (inspecting or controlling other "
                                                         "processes is not allowed)")
        elif parts[0] in THREAD_MODULES:
            self._flag("threads", INFO, node, f"uses {name} (threads)", subject=parts[0])
        elif parts[0] in PROCESS_MODULES or name.startswith("torch.multiprocessing"):
            self._flag("subprocess", INFO, node, f"uses {name} (extra processes)", subject=parts[0])
        elif parts[0] == "ctypes":
            self._flag("ctypes", INFO, node, "imports ctypes", subject="ctypes")

    # ---- writes: assignment, del, augmented assignment, for/with targets all land here
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in INTROSPECTION_ATTRS:
            self._flag("introspection", EXPLOIT, node, f"reads .{node.attr} (reaching into functions' code, "
                                                       f"defaults or closures is not allowed)")
        if node.attr in FRAME_ATTRS:
            self._flag("frame_inspection", EXPLOIT, node, f"reads .{node.attr} (inspecting the caller's frames "
                                                          f"is not allowed)")
        self._check_name(node.attr, node, "reaches")
        if not isinstance(node.ctx, ast.Load):
            base = self._dotted(node.value, subscripts=True)
            if base:
                self._check_patch(f"{base}.{node.attr}", node)
        else:
            base = self._dotted(node.value)
            if base in LIBRARY_HANDLES:
                self._check_library(node.attr, node)
            if node.attr in MODULE_FILE_ATTRS and (base or "").split(".")[0] == "pkb_env":
                self._flag("load_from_file", EXPLOIT, node, f"reads {base}.{node.attr} (the package's files): "
                                                            f"{LOAD_FROM_FILE_FIX}")
            if base == "pkb_env" and node.attr != "runtime":
                self._flag("judge_import", EXPLOIT, node, f"reaches pkb_env.{node.attr} (only pkb_env.runtime "
                                                          f"is open to candidates)")
            elif base == "os" and node.attr == "environ":
                self._flag("reads_environment", INFO, node, "reads os.environ", subject="os.environ")
            elif base == "sys" and node.attr == "modules":
                self._flag("sys_modules", EXPLOIT, node, "reaches sys.modules (other modules' internals, the "
                                                         "judge's included, are not open to candidates)")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.ctx, ast.Load):
            base = self._dotted(node.value, subscripts=True)
            if base == "sys.modules" or (base or "").startswith("sys.modules"):
                self._flag("sys_modules", EXPLOIT, node, "writes sys.modules (replacing modules is not allowed)")
            elif base in ("os.environ", "os.environb"):
                self._check_env_key(node.slice, node)
                self._flag("sets_environment", INFO, node, "sets os.environ entries", subject="os.environ")
            elif base in IMPORT_PATHS:
                self._flag("load_from_file", EXPLOIT, node, f"writes {base}[...] (imports would reach other "
                                                            f"folders): {LOAD_FROM_FILE_FIX}")
            elif base and (base == "builtins" or base.endswith(".__dict__")) and base.split(".")[0] in PROTECTED:
                self._flag("monkeypatch", EXPLOIT, node, f"writes {base}[...] (monkeypatching "
                                                         f"{base.split('.')[0]} is not allowed)")
        elif self._dotted(node.value) in LIBRARY_HANDLES:
            self._check_library(node.slice, node)
        elif self._visit_text(node):
            return
        self.generic_visit(node)

    def _check_patch(self, path: str, node: ast.AST, via: str = "assigns") -> None:
        parts = path.split(".")
        root = parts[0].removesuffix("[]")
        if root not in PROTECTED:
            return
        if path.startswith("torch.backends."):
            self._flag("changes_math_mode", INFO, node, f"{via} {path} (math mode: outputs are still checked "
                                                        f"at the task's tolerance)", subject=path)
        elif root == "torch" and "config" in parts[1:-1]:
            self._flag("changes_config", INFO, node, f"{via} {path}", subject=path)
        elif path.startswith("sys.modules"):
            self._flag("sys_modules", EXPLOIT, node, f"{via} {path} (replacing modules is not allowed)")
        elif path in IMPORT_PATHS:
            self._flag("load_from_file", EXPLOIT, node, f"{via} {path} (imports would reach other folders): "
                                                        f"{LOAD_FROM_FILE_FIX}")
        else:
            what = "the timer" if parts[-1] in TIMER_ATTRS and root in {"torch", "time"} else \
                "builtins" if root == "builtins" else root
            self._flag("monkeypatch", EXPLOIT, node, f"{via} {path} (monkeypatching {what} is not allowed)")

    # ---- calls
    def visit_Call(self, node: ast.Call) -> None:
        name = self._dotted(node.func, calls=True)
        if name:
            self._check_call(name.removesuffix("()"), node)
        self._check_routes((name or "").removesuffix("()"), node)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "from_address":
            self._flag("ctypes_memory", EXPLOIT, node, ".from_address(...) reads raw memory (not allowed)")
        if not self._visit_text(node):
            self.generic_visit(node)

    def _check_routes(self, name: str, node: ast.Call) -> None:
        """Calls that reach NVLink multicast or load code from files, by name or by what they are given."""
        func = node.func
        last = func.attr if isinstance(func, ast.Attribute) else name.rsplit(".", 1)[-1]
        first = node.args[0] if node.args else None
        if name in DRIVER_HANDLES:
            self._flag("multicast", EXPLOIT, node, f"calls {name} (the CUDA driver's library, where "
                                                   f"cuMulticastCreate is): {MULTICAST_FIX}")
        elif last in LIBRARY_LOADERS and not name.startswith("pkb_env."):
            named = first if first is not None else next((k.value for k in node.keywords if k.arg in
                                                          ("name", "path", "libname", "lib_name")), None)
            if named is not None:
                self._check_library(named, node)
        elif last in LIBC_ENV and not name.startswith("os."):
            self._flag("multicast", EXPLOIT, node, f"calls {last}() beside os.environ (the environment holds NVLink "
                                                   f"multicast's switches): {MULTICAST_FIX}")
        elif name in ("builtins.getattr", "builtins.vars") and first is not None:
            target = self._dotted(first, subscripts=True) or ""
            computed = name == "builtins.vars" or len(node.args) < 2 or _const_str(node.args[1]) is None
            if computed and target.startswith(DRIVER_MODULES):
                self._flag("multicast", EXPLOIT, node, f"calls {name.removeprefix('builtins.')}() on {target} with "
                                                       f"a computed name (which driver function?): {MULTICAST_FIX}")
        elif name in ENV_KEYED:
            key = first if first is not None else next((k.value for k in node.keywords if k.arg == "key"), None)
            self._check_env_key(key, node)
        elif name in ENV_MAPPING:
            for arg in node.args:
                keys = arg.keys if isinstance(arg, ast.Dict) else [None]
                for key in keys:
                    self._check_env_key(key, node)
            for keyword in node.keywords:
                self._check_env_key(None if keyword.arg is None else ast.Constant(keyword.arg), node)
        elif name in ENV_ALL:
            self._flag("multicast", EXPLOIT, node, f"calls {name} (it removes NVLink multicast's switches from the "
                                                   f"environment): {MULTICAST_FIX}")
        elif name in LOAD_FROM_FILE or name.startswith(LOADER_PREFIXES):
            self._flag("load_from_file", EXPLOIT, node, f"calls {name}: {LOAD_FROM_FILE_FIX}")
        elif name == "importlib.util.find_spec":
            module = _const_str(first) if first is not None else None
            if module:
                self._check_module(module, node)
            else:
                self._flag("dynamic_import", EXPLOIT, node, f"calls {name} with a computed name (imports must "
                                                            f"name their module)")
        elif name.rsplit(".", 1)[0] in IMPORT_PATHS and last in IMPORT_PATH_WRITES:
            self._flag("load_from_file", EXPLOIT, node, f"calls {name} (imports would reach other folders): "
                                                        f"{LOAD_FROM_FILE_FIX}")

    def _check_library(self, named: ast.AST | str, node: ast.AST) -> None:
        """A shared library loaded by name (ctypes, cffi): the CUDA driver's, or one named at run time, is refused."""
        if isinstance(named, ast.Constant) and named.value is None:
            return   # the process's own symbols (dlopen(NULL)): docs/known_holes.md, "Code in a rank"
        text = Text(named, True) if isinstance(named, str) else self.strings.text(named)
        if text is None or not text.complete:
            self._flag("multicast", EXPLOIT, node, f"loads a shared library by a computed name (the judge cannot "
                                                   f"tell it from the CUDA driver's): name it literally")
        elif DRIVER_LIBRARY.search(text.value):
            self._flag("multicast", EXPLOIT, node, f"loads {text.value!r} (the CUDA driver, where cuMulticastCreate "
                                                   f"is): {MULTICAST_FIX}")

    def _check_env_key(self, key: ast.AST | None, node: ast.AST) -> None:
        """An environment variable written or removed: refused where it is a multicast switch or named at run time."""
        text = self.strings.text(key) if key is not None else None
        if text is None or not text.complete:
            self._flag("multicast", EXPLOIT, node, "sets or removes an environment variable by a computed name (it "
                                                   "could be one of NVLink multicast's switches): name it literally")
        else:
            self._check_text(text.value, node)

    def _check_name(self, name: str, node: ast.AST, via: str) -> None:
        found = multicast_use(name)
        if found:
            self._flag("multicast", EXPLOIT, node, f"{via} {name} ({found[0]}): {MULTICAST_FIX}")

    # ---- strings: the whole string an expression builds, checked once (strings.py)
    def _visit_text(self, node: ast.AST) -> bool:
        """Check the string `node` builds, if it builds one, then visit what is inside it; False when it does not."""
        if not self.strings.is_text(node):
            return False
        text = self.strings.text(node)
        if text is not None:
            self._check_text(text.value, node)
        self._visit_parts(node)
        return True

    def _visit_parts(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Constant):
                self._check_constant(child)
            elif self.strings.is_text(child):
                self._visit_parts(child)   # part of the string checked whole
            else:
                self.visit(child)

    def _check_text(self, text: str, node: ast.AST) -> None:
        self.strings.charge(len(text))
        code = without_comments(text) if text else ""
        found = multicast_use(code) if code else None
        if found:
            what, around = found
            line = None
            if isinstance(node, ast.Constant) and "\n" in code:   # the line of a long source where it is
                line = node.lineno + next((i for i, part in enumerate(code.split("\n")) if multicast_use(part)), 0)
            self._flag("multicast", EXPLOIT, node, f"{what} in a string ({around!r}): {MULTICAST_FIX}", line=line)
        low = text.lower()
        if ("experts" in low or "candidates" in low or "examples" in low) and ANSWER_KEY_PATHS.search(text):
            self._flag("load_from_file", EXPLOIT, node, f"names the expert solutions' folder: {LOAD_FROM_FILE_FIX}")

    def _check_call(self, name: str, node: ast.Call) -> None:
        last = name.rsplit(".", 1)[-1]
        op = last.rstrip("_") if last.endswith("_") and not last.startswith("_") else last  # all_reduce_
        if (name.startswith("torch.distributed.") or name.startswith("torch.ops.") and "c10d" in name) \
                and op in COLLECTIVES:
            if self.collectives_allowed:
                self._flag("uses_collectives", INFO, node, f"calls {name}", subject=name)
            else:
                self._flag("forbidden_collective", EXPLOIT, node, f"calls {name} (this task forbids "
                                                                  f"torch.distributed collectives: move the data "
                                                                  f"yourself, e.g. with symmetric memory)")
        elif name in GC_SCAN:
            self._flag("gc_scan", EXPLOIT, node, f"calls {name} (scanning the heap for objects is not allowed)")
        elif name in KILL:
            self._flag("process_kill", EXPLOIT, node, f"calls {name} (signalling processes is not allowed)")
        elif name == "os.getppid":
            self._flag("parent_pid", INFO, node, "calls os.getppid", subject=name)
        elif name in TRACING:
            self._flag("tracing", EXPLOIT, node, f"calls {name} (tracing or hooking the interpreter is not allowed)")
        elif name in FRAMES:
            self._flag("frame_inspection", EXPLOIT, node, f"calls {name} (inspecting the caller's frames is "
                                                          f"not allowed)")
        elif name == "importlib.reload":
            self._flag("module_reload", EXPLOIT, node, "calls importlib.reload (reloading modules is not allowed)")
        elif name in IMPORTERS:
            module = _const_str(node.args[0]) if node.args else None
            if module:
                self._check_module(module, node)
            else:
                self._flag("dynamic_import", EXPLOIT, node, f"calls {name} with a computed name (imports must "
                                                            f"name their module)")
        elif name in ("builtins.getattr", "builtins.vars") and node.args:
            target = self._dotted(node.args[0], subscripts=True)
            computed = name == "builtins.vars" or len(node.args) < 2 or _const_str(node.args[1]) is None
            if target and target.split(".")[0] in SYSTEM_MODULES and computed:
                self._flag("dynamic_attribute", EXPLOIT, node, f"calls {last}() on {target} with a computed name "
                                                               f"(obfuscated access to system modules is not allowed)")
        elif name in SETATTR and node.args:
            target = self._dotted(node.args[0], subscripts=True)
            attr = _const_str(node.args[1]) if len(node.args) > 1 else None
            if target:
                self._check_patch(f"{target}.{attr or '<computed>'}", node, via=f"{last} on")
        elif name in CTYPES_MEMORY or name.startswith("ctypes.pythonapi."):
            self._flag("ctypes_memory", EXPLOIT, node, f"calls {name} (raw memory access is not allowed)")
        elif ".mock.patch" in f".{name}" or name.endswith("monkeypatch.setattr"):
            self._flag("monkeypatch", EXPLOIT, node, f"calls {name} (patching modules is not allowed)")
        elif name in SYS_MODULES_WRITE:
            self._flag("sys_modules", EXPLOIT, node, f"calls {name} (replacing modules is not allowed)")
        elif name in OPEN:
            path = _const_str(node.args[0]) if node.args else None
            self._flag("file_access", INFO, node, f"opens {path!r}" if path else f"calls {name}",
                       subject=path or name)
        elif name == "time.sleep":
            self._flag("sleeps", INFO, node, "calls time.sleep", subject=name)
        elif name in ENV_READ or name == "os.environ.get":
            self._flag("reads_environment", INFO, node, f"calls {name}", subject="os.environ")
        elif name in ENV_WRITE:
            self._flag("sets_environment", INFO, node, f"calls {name}", subject="os.environ")
        elif name in MATH_MODE:
            self._flag("changes_math_mode", INFO, node, f"calls {name} (math mode: outputs are still checked "
                                                        f"at the task's tolerance)", subject=name)
        elif name in SUBPROCESS or name.startswith(("os.exec", "os.spawn")):
            self._flag("subprocess", INFO, node, f"calls {name}", subject=name)
        elif name in DYNAMIC_CODE:
            self._flag("dynamic_code", EXPLOIT, node, f"calls {last} (code built at run time would escape this "
                                                      f"screen; write it in the module)")
        elif name == "signal.signal":
            self._flag("signal_handler", INFO, node, "installs a signal handler", subject=name)

    # ---- the rest
    def visit_Try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            caught = self._broad(handler.type)
            if caught and not isinstance(handler.body[-1], ast.Raise):  # re-raising is no fallback
                self._flag("broad_except", INFO, handler, f"{caught} (a possible fallback: whatever path runs "
                                                          f"is verified and timed)", subject="except")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def _broad(self, node: ast.expr | None) -> str | None:
        if node is None:
            return "bare except"
        types = node.elts if isinstance(node, ast.Tuple) else [node]
        for t in types:
            name = self._dotted(t)
            if name in ("builtins.Exception", "builtins.BaseException"):
                return f"except {name.removeprefix('builtins.')}"
        return None

    def visit_Expr(self, node: ast.Expr) -> None:
        if _const_str(node.value) is None:  # a bare string is a docstring or a comment: never flagged
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        self._check_constant(node)
        self._visit_text(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._visit_text(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not self._visit_text(node):
            self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
            built = self.strings.name(node.target.id)   # all the scope's `+=` on the name, appended
            if built is not None:
                self._check_text(built.value, node)
        self.generic_visit(node)

    def _check_constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if isinstance(value, str) and PROC_PATHS.search(value):
            shown = value if len(value) <= 60 else value[:57] + "..."
            self._flag("proc_access", EXPLOIT, node, f"names {shown!r} (reading /proc or raw memory devices "
                                                     f"is not allowed)")


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
