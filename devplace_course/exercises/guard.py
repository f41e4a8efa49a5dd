"""Copy detection: a submission must not answer an exercise by calling the library's own answer.

Each exercise lists the library functions that compute its answer (``Exercise.forbidden``:
``"module"`` for everything defined there, ``"module:name"`` for one function or class; the
references in ``devplace_course.exercises`` are always on the list). Two checks, both run by the
grader's worker inside the sandbox, the static one before any of the submission's code runs:

* `inspect_statically` reads the submission's source (``ast``; nothing is executed): from the
  exercise's function, through the submission's own functions it names, it resolves every name
  and attribute through the submission's imports and aliases (``import devplace_lite.cost as c``,
  ``from ... import max_load as m``, ``f = c.max_load``) and flags a forbidden one, a string
  equal to a forbidden function's name (``getattr(c, "max_load")``), and a function whose body
  is a forbidden function's body (a pasted copy). Machinery that could hide a call (``getattr``
  with a computed name, ``importlib``, ``exec``, ``__code__``, ``gc`` ...) is listed for review
  where it is in code that runs (at load time, or called from the exercises' functions): an
  import nothing uses, such as the book's own hidden install cell, is not listed.
* `Guard` is the runtime tripwire: the code of every forbidden function is swapped, in place, for
  a stub that records the call when it happens during that exercise and then runs the original,
  so every alias of the function (another name, ``getattr``, ``importlib.import_module``, a
  library dispatcher that calls it) trips it. An audit hook (which cannot be removed) blocks
  patching those functions back and flags rebuilding them from their code, re-executing their
  module (``importlib.reload``, ``exec`` of its file) and compiling their source.

What it cannot do: the guard lives in the submission's process, so a student who studies it can
still disarm it (through ``co_consts`` or ``gc``, say); the static report lists such machinery
for the instructor to read. Re-typing the library's algorithm by hand is not a call; it is found,
if at all, only when the body is a verbatim copy.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

#: every exercise also forbids its own reference and helpers
ALWAYS_FORBIDDEN = ("devplace_course.exercises.ch*",)
#: names whose use in a submission can hide a call; shown to the instructor for review
_REVIEW_CALLS = {"getattr": "getattr", "__import__": "__import__", "exec": "exec", "eval": "eval",
                 "compile": "compile", "globals": "globals()", "setattr": "setattr"}
_REVIEW_ATTRS = {"__code__", "co_consts", "__closure__", "cell_contents", "__globals__", "__self__", "__wrapped__",
                 "f_globals", "f_back", "_getframe", "modules", "reload", "import_module", "get_referrers",
                 "get_objects", "getsource", "setprofile", "settrace", "addaudithook"}
_REVIEW_MODULES = {"importlib", "ctypes", "gc", "inspect", "types", "marshal", "pickle", "subprocess", "multiprocessing"}


# -- which library objects an exercise forbids ---------------------------------------------------------
def _modules_matching(pattern: str) -> list[types.ModuleType]:
    """Imported modules named by ``pattern``: a module, its submodules, or ``prefix*``."""
    if pattern.endswith("*"):
        stem = pattern[:-1]
        return [m for name, m in sorted(sys.modules.items()) if m is not None and name.startswith(stem)]
    return [m for name, m in sorted(sys.modules.items())
            if m is not None and (name == pattern or name.startswith(pattern + "."))]


def _functions_of(obj: Any, qualname: str) -> Iterable[tuple[str, types.FunctionType]]:
    """``(qualified name, function)`` for a function, or for every method of a class."""
    if isinstance(obj, types.FunctionType):
        yield qualname, obj
    elif isinstance(obj, type):
        for name, member in vars(obj).items():
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType):
                yield f"{qualname}.{name}", member


def resolve(pattern: str) -> list[tuple[str, types.FunctionType]]:
    """The functions (and methods) a forbidden pattern names, among the modules imported now."""
    module_name, _, attr = pattern.partition(":")
    out = []
    for module in _modules_matching(module_name):
        if attr:
            if hasattr(module, attr):
                out += _functions_of(getattr(module, attr), f"{module.__name__}.{attr}")
            continue
        for name, obj in list(vars(module).items()):
            if getattr(obj, "__module__", None) == module.__name__:
                out += _functions_of(obj, f"{module.__name__}.{name}")
    if module_name.startswith("devplace_course.exercises.ch"):  # the registered references (lambdas included)
        core = sys.modules.get("devplace_course.exercises.core")
        for ex in (core.REGISTRY.values() if core else ()):
            ref = ex.reference
            if isinstance(ref, types.FunctionType) and ref.__module__.startswith("devplace_course.exercises.ch"):
                out.append((f"the reference of exercise {ex.id}", ref))
    return out


# -- the static inspection -------------------------------------------------------------------------
@dataclass
class StaticReport:
    """What reading the source found: per exercise id, the forbidden uses (each one line), and
    the machinery to review."""

    copies: dict[str, list[str]] = field(default_factory=dict)
    review: list[str] = field(default_factory=list)


def _body_fingerprint(fn: ast.AST) -> str:
    """The body of a function, docstring dropped, as an AST dump (layout and comments ignored)."""
    body = list(getattr(fn, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]), annotate_fields=False)


class _Module:
    """The top-level names of a submission: its imports, aliases, functions and classes."""

    def __init__(self, trees: list[ast.Module]) -> None:
        self.alias: dict[str, str] = {}       # local name -> qualified name
        self.defs: dict[str, ast.AST] = {}    # local function/class name -> node
        self.top: list[ast.stmt] = []
        for tree in trees:
            for node in tree.body:
                self.top.append(node)
                if isinstance(node, ast.Import):
                    for a in node.names:
                        self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    for a in node.names:
                        if a.name != "*":
                            self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.defs[node.name] = node
                elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    target = self.qualify(node.value)
                    if target is not None:
                        self.alias[node.targets[0].id] = target

    def qualify(self, node: ast.AST) -> str | None:
        """The qualified name of a name or attribute chain, through the submission's imports."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.alias.get(node.id)
        if head is None:
            return None
        return ".".join([head] + parts[::-1])

    def reachable(self, name: str) -> list[ast.AST]:
        """The definition of ``name`` and of every submission function or class it names, transitively."""
        seen, todo, out = set(), [name], []
        while todo:
            current = todo.pop()
            if current in seen or current not in self.defs:
                continue
            seen.add(current)
            out.append(self.defs[current])
            todo += [n.id for n in ast.walk(self.defs[current]) if isinstance(n, ast.Name)]
        return out


def _qualnames(fn: types.FunctionType, qualname: str) -> set[str]:
    """Every dotted name under which the library or the course reaches ``fn`` (its module and re-exports)."""
    names = {qualname}
    for mod_name, module in list(sys.modules.items()):
        if module is None or not mod_name.startswith(("devplace_lite", "devplace_course")):
            continue
        for attr, value in list(vars(module).items()):
            if value is fn:
                names.add(f"{mod_name}.{attr}")
    return names


def inspect_statically(trees: list[ast.Module], exercises: dict[str, tuple[str, list[str]]]) -> StaticReport:
    """Read a submission's code (``trees``, what the worker will run) for each exercise
    ``id -> (function name, forbidden patterns)``; nothing is executed."""
    module = _Module(trees)
    report = StaticReport()
    runs = _code_that_runs(module, [name for name, _ in exercises.values()])
    used = {n.id for n in runs if isinstance(n, ast.Name)}
    for node in runs + [n for n in module.top if isinstance(n, (ast.Import, ast.ImportFrom))]:
        for line in _review_lines(node, module, used):
            if line not in report.review:
                report.review.append(line)
    for ex_id, (name, patterns) in exercises.items():
        every = [*patterns, *ALWAYS_FORBIDDEN]
        targets = [t for p in every for t in resolve(p)]
        dotted = {q: label for label, fn in targets for q in _qualnames(fn, label)}
        dotted.update({p.replace(":", "."): p.replace(":", ".") for p in every if ":" in p})  # modules not imported yet
        prefixes = [p[:-1] if p.endswith("*") else p + "." for p in every if ":" not in p]
        short = {fn.__name__: label for label, fn in targets if not fn.__name__.startswith("<")}
        short.update({p.partition(":")[2]: p.replace(":", ".") for p in every if ":" in p})
        bodies = {}
        for label, fn in targets:
            try:
                bodies[_body_fingerprint(ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0])] = label
            except (OSError, TypeError, SyntaxError, IndexError):
                pass
        found: list[str] = []
        docstrings = {id(d.body[0].value) for d in ast.walk(ast.Module(module.top, []))
                      if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and d.body
                      and isinstance(d.body[0], ast.Expr) and isinstance(d.body[0].value, ast.Constant)}
        for definition in module.reachable(name):
            if isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(definition.body) > 1:
                label = bodies.get(_body_fingerprint(definition))
                if label:
                    found.append(f"{definition.name} (line {definition.lineno}) is a copy of the code of {label}")
            for node in ast.walk(definition):
                hit = None
                if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                    q = module.qualify(node)
                    hit = dotted.get(q) if q else None
                    if hit is None and q and any(q.startswith(prefix) for prefix in prefixes):
                        hit = q
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    named = next((n for n in short if re.search(rf"\b{re.escape(n)}\b", node.value)), None)
                    if named:
                        hit = f"{short[named]} (named in the string {node.value[:60]!r})"
                if hit:
                    line = f"{name} uses {hit} (line {getattr(node, 'lineno', '?')})"
                    if line not in found:
                        found.append(line)
        if found:
            report.copies[ex_id] = found
    return report


def _load_time(node: ast.stmt) -> list[ast.AST]:
    """What of a top-level statement runs when the submission is loaded: all of it, except the
    body of a function (its decorators, defaults and annotations run; its body only when called)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        parts = [*node.decorator_list, *a.defaults, *[d for d in a.kw_defaults if d is not None],
                 *[x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                   if x is not None and x.annotation is not None]]
        if node.returns is not None:
            parts.append(node.returns)
        return parts
    return [node]


def _code_that_runs(module: _Module, names: list[str]) -> list[ast.AST]:
    """Every node of the code that runs when the submission is graded: what runs at load time,
    and the functions (and classes) the exercises' functions and that code name, transitively.
    A cell of the book that nothing calls (the hidden install cell's imports, say) is not in it,
    so only the student's code is listed for review."""
    at_load = [n for stmt in module.top for part in _load_time(stmt) for n in ast.walk(part)]
    seeds = list(names) + [n.id for n in at_load if isinstance(n, ast.Name)]
    seen: set[int] = set()
    called = []
    for seed in seeds:
        for d in module.reachable(seed):
            if id(d) not in seen:
                seen.add(id(d))
                called += list(ast.walk(d))
    return at_load + called


def _review_lines(node: ast.AST, module: _Module, used: set[str] | None = None) -> list[str]:
    """The review notes of one node; an import only when code that runs uses a name it binds
    (``used``; None: always)."""
    out = []
    where = f"line {getattr(node, 'lineno', '?')}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _REVIEW_CALLS:
        computed = node.func.id in ("getattr", "setattr") and not (len(node.args) > 1 and isinstance(node.args[1], ast.Constant))
        if node.func.id not in ("getattr", "setattr") or computed:
            out.append(f"{_REVIEW_CALLS[node.func.id]}{' with a computed name' if computed else ''} ({where})")
    elif isinstance(node, ast.Attribute) and node.attr in _REVIEW_ATTRS:
        out.append(f".{node.attr} ({where})")
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        if isinstance(node, ast.Import):
            pairs = [(a.name, a.asname or a.name.split(".")[0]) for a in node.names]
        else:
            pairs = [(node.module or "", a.asname or a.name) for a in node.names]
        for n, bound in pairs:
            if n.split(".")[0] in _REVIEW_MODULES and (used is None or bound in used or bound == "*"):
                line = f"import {n} ({where})"
                if line not in out:
                    out.append(line)
    return out


# -- the runtime tripwire ----------------------------------------------------------------------------
class Guard:
    """Tripwires on the forbidden functions of the exercises being graded, in this process.

    ``guard.current`` is the exercise whose function is running (``None`` otherwise); a call of a
    function that exercise forbids is reported through ``report(ex_id, what)`` when it happens.
    `refresh` guards what has been imported since (call it before each call of the learner's
    function).
    """

    def __init__(self, forbidden: dict[str, list[str]], report: Callable[[str, str], None]) -> None:
        self.patterns = {ex: [*p, *ALWAYS_FORBIDDEN] for ex, p in forbidden.items()}
        self.report = report
        self.current: str | None = None
        self.forbidden_for: dict[str, set[str]] = {ex: set() for ex in forbidden}
        self.originals: dict[str, types.FunctionType] = {}
        self._guarded: dict[int, str] = {}          # id(function object) -> key
        self._codes: dict[int, str] = {}            # id(original code object) -> key
        self._files: dict[str, set[str]] = {}       # guarded module file -> keys defined there
        self._sources: dict[str, str] = {}          # key -> source text of the original
        self._patching = False
        self._state: tuple[int, int] | None = None
        self._dirty = False
        self.refresh()
        sys.addaudithook(self._audit)

    def refresh(self) -> None:
        """Guard what is new since the last call (modules imported, references registered, a reload)."""
        core = sys.modules.get("devplace_course.exercises.core")
        state = (len(sys.modules), len(core.REGISTRY) if core else 0)
        if state == self._state and not self._dirty:
            return
        self._state, self._dirty = state, False
        self._patching = True
        try:
            for ex, patterns in self.patterns.items():
                for pattern in patterns:
                    for label, fn in resolve(pattern):
                        key = self._guard(label, fn)
                        if key:
                            self.forbidden_for[ex].add(key)
        finally:
            self._patching = False

    def _guard(self, label: str, fn: types.FunctionType) -> str | None:
        if id(fn) in self._guarded:
            return self._guarded[id(fn)]
        if fn.__closure__ or fn.__code__.co_freevars:  # the stub cannot take a closure's place
            return None
        key = label
        original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        try:
            self._sources[key] = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            pass
        self.originals[key] = original
        self._codes[id(fn.__code__)] = key
        self._files.setdefault(fn.__code__.co_filename, set()).add(key)
        fn.__code__ = _stub(fn.__code__, key, self._trip)
        self._guarded[id(fn)] = key
        return key

    def _trip(self, key: str, args: tuple, kwargs: dict) -> Any:
        ex = self.current
        if ex is not None and key in self.forbidden_for.get(ex, ()):
            self.report(ex, f"called {key}")
        return self.originals[key](*args, **kwargs)

    def _flag(self, keys: set[str], what: str) -> None:
        """Flag the exercise running now, or at load time every exercise that forbids one of ``keys``."""
        exs = [self.current] if self.current is not None else list(self.forbidden_for)
        for ex in exs:
            if ex is not None and keys & self.forbidden_for.get(ex, set()):
                self.report(ex, what)

    def _audit(self, event: str, args: tuple) -> None:
        if self._patching:
            return
        if event == "object.__setattr__" and len(args) >= 2 and args[1] == "__code__" and id(args[0]) in self._guarded:
            key = self._guarded[id(args[0])]
            self._flag({key}, f"tried to patch {key} back")
            raise RuntimeError("grading: the library's functions cannot be patched while grading")
        if event == "function.__new__" and args and id(args[0]) in self._codes:
            key = self._codes[id(args[0])]
            self._flag({key}, f"rebuilt {key} from its code")
        elif event == "exec" and args and getattr(args[0], "co_name", None) == "<module>" \
                and getattr(args[0], "co_filename", None) in self._files:
            keys = self._files[args[0].co_filename]
            self._dirty = True  # its new functions are guarded before the next call
            self._flag(keys, f"re-executed the module of {sorted(keys)[0]} (reload, or exec of its file)")
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn") and self.current is not None:
            text = " ".join(map(str, args[:2]))  # the program and its arguments
            keys = {k for k in self.forbidden_for.get(self.current, ())
                    if " " not in k and re.search(rf"\b{re.escape(k.rsplit('.', 1)[-1])}\b", text)}
            if keys:
                self._flag(keys, f"started a program that names {sorted(keys)[0]}: {text[:120]}")
        elif event == "compile" and args and isinstance(args[0], (str, bytes)):
            text = args[0].decode("utf-8", "replace") if isinstance(args[0], bytes) else args[0]
            keys = {k for k, src in self._sources.items() if src.count("\n") >= 3 and src in text}
            if keys:
                self._flag(keys, f"compiled the source of {sorted(keys)[0]}")


def _stub(code: types.CodeType, key: str, trip: Callable) -> types.CodeType:
    """A code object that calls ``trip(key, args, kwargs)``, with the original's name and file."""
    src = f"def {code.co_name if code.co_name.isidentifier() else 'f'}(*args, **kwargs):\n" \
          f"    return '__TRIP__'({key!r}, args, kwargs)\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "'str' object is not callable": the constant is replaced below
        ns: dict[str, Any] = {}
        exec(compile(src, code.co_filename, "exec"), ns)
    stub = next(v for v in ns.values() if isinstance(v, types.FunctionType)).__code__
    names = {"co_name": code.co_name}
    if hasattr(code, "co_qualname"):  # Python 3.11+
        names["co_qualname"] = code.co_qualname
    return stub.replace(co_consts=tuple(trip if c == "__TRIP__" else c for c in stub.co_consts),
                        co_firstlineno=code.co_firstlineno, **names)
