"""Load a user's Python file: its functions, module-level constants and imports."""
from __future__ import annotations

import ast
import dataclasses
import math
import operator
import sys
from pathlib import Path
from typing import Sequence

from ...errors import KsbuildError, Location
from ...ir.core import Func
from ...ir.types import Type
from .compiler import KernelCompiler, Source
from .custom_rules import collect_rules, wrap_entry
from .externs import collect_externs
from .imported import sibling_module
from .scope import Const

# importable modules -> the namespace their functions are looked up in
KNOWN_MODULES = {"math": "math", "torch": "torch", "torch.nn": "nn", "torch.nn.functional": "F",
                 "torch.linalg": "linalg", "torch.special": "special"}
PARSE_RECURSION_LIMIT = 25_000  # ast.parse of 20000 nested levels fits the 8 MB stack of a main thread
_MATH_FOLD = {"log", "log2", "log10", "log1p", "exp", "sqrt", "sin", "cos", "tan", "atan", "lgamma", "pow"}
_FOLD = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
         ast.Pow: operator.pow, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def load_source(path: Path, loading: tuple[Path, ...] = ()) -> Source:
    """Parse a Python file; a syntax error points at the user's line. `loading`: the files whose imports led
    here (module constants, see imported.py)."""
    text = _read_utf8(path)
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark (files saved by Visual Studio start with one)
    try:
        tree = _parse(text, path)
    except SyntaxError as e:
        loc = Location(str(path), e.lineno or 0, (e.offset or 1) - 1, None, (e.text or "").rstrip("\n") or None)
        raise KsbuildError(f"Python syntax error: {e.msg}", loc) from None
    src = Source(path, text.splitlines(), tree)
    for node in tree.body:
        _top_level(src, node, (*loading, path.resolve()))
    src.externs = collect_externs(src)
    src.files += [Path(f) for e in src.externs.values() for f in e.sources]  # (a build depends on them)
    src.custom = collect_rules(src)
    return src


def imported_files(path: Path) -> list[Path]:
    """The files of the modules whose constants the kernel file at `path` imports, directly or not (a build
    depends on them); [] when the file cannot be read or parsed (the compile reports that)."""
    try:
        return load_source(path).files
    except (KsbuildError, OSError, UnicodeDecodeError):
        return []


def _parse(text: str, path: Path) -> ast.Module:
    """ast.parse, with room for the expressions CPython's parser nests deeply (a sum of 5000 terms is 5000
    levels of BinOp: more than the default recursion limit lets ast.parse build)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, PARSE_RECURSION_LIMIT))
    try:
        return ast.parse(text, filename=str(path))
    except (RecursionError, MemoryError):
        raise KsbuildError("an expression in this file nests too deeply for Python's parser", Location(str(path)),
                           hint="split a long sum or chain into several statements") from None
    finally:
        sys.setrecursionlimit(limit)


def _read_utf8(path: Path) -> str:
    """The text of a kernel file; bytes that are not UTF-8 are an error at their line and column."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        text = data[start:].split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("\r")
        col = len(data[start:e.start].decode("utf-8", "replace"))
        loc = Location(str(path), line, col, None, text)
        raise KsbuildError(f"the file is not UTF-8: byte 0x{data[e.start]:02x} is not valid UTF-8 here",
                           loc, hint="save the file as UTF-8 (Python 3's encoding for source files)") from None


def _top_level(src: Source, node: ast.stmt, loading: tuple[Path, ...]) -> None:
    if isinstance(node, ast.FunctionDef):
        src.functions[node.name] = node
    elif isinstance(node, ast.Import):
        for a in node.names:
            if a.asname and a.name in KNOWN_MODULES:
                src.modules[a.asname] = KNOWN_MODULES[a.name]
            elif a.name.split(".")[0] in KNOWN_MODULES:  # `import torch.nn.functional` binds `torch`
                src.modules[a.name.split(".")[0]] = KNOWN_MODULES[a.name.split(".")[0]]
            elif not _constants_module(src, a.asname or a.name, a.name, 0, loading):
                src.foreign[a.asname or a.name.split(".")[0]] = a.name  # numpy...: an error where a kernel uses it
    elif isinstance(node, ast.ImportFrom) and node.module not in KNOWN_MODULES:  # from helpers import f
        found = sibling_module(src.path, node.module, node.level, loading, load_source)
        for a in node.names:
            sub = f"{node.module}.{a.name}" if node.module else a.name  # from . import consts
            if found is not None and a.name in found.constants:
                src.constants[a.asname or a.name] = found.constants[a.name]
            elif not _constants_module(src, a.asname or a.name, sub, node.level, loading):
                src.borrowed[a.asname or a.name] = "." * node.level + (node.module or "")
        if found is not None:
            src.files += [found.path, *found.files]
    elif isinstance(node, ast.ImportFrom) and node.module in KNOWN_MODULES:
        for a in node.names:
            sub = f"{node.module}.{a.name}"
            if sub in KNOWN_MODULES:  # from torch.nn import functional as F
                src.modules[a.asname or a.name] = KNOWN_MODULES[sub]
            else:
                src.imported[a.asname or a.name] = (KNOWN_MODULES[node.module], a.name)
    elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        value = _constant(src, node.value)
        name = node.targets[0].id
        if value is not None:
            src.constants[name] = value if isinstance(value, tuple) else Const(value)
        else:
            src.globals.add(name)
            src.constants.pop(name, None)


def _constants_module(src: Source, alias: str, module: str, level: int, loading: tuple[Path, ...]) -> bool:
    """Bind `alias` to the constants of `module` if it is a file next to the kernel file (import consts)."""
    if "." in alias:
        return False  # (`import a.b` binds `a`: write `import a.b as c` or `from a.b import X`)
    found = sibling_module(src.path, module, level, loading, load_source)
    if found is not None:
        src.const_modules[alias] = found.constants
        src.files += [found.path, *found.files]
    return found is not None


def _constant(src: Source, e: ast.expr):
    """The value of a module-level constant expression, or None if it is not one."""
    if isinstance(e, ast.Constant) and isinstance(e.value, (bool, int, float)):
        return e.value
    if isinstance(e, (ast.Tuple, ast.List)):  # COEFFS = (1.0, -0.5): a tuple of constants (lists are read as tuples)
        items = [_constant(src, x) for x in e.elts]
        return tuple(x if isinstance(x, tuple) else Const(x) for x in items) if None not in items else None
    if isinstance(e, ast.Name) and e.id in src.constants:
        c = src.constants[e.id]
        return c if isinstance(c, tuple) else c.value
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and \
            e.attr in src.const_modules.get(e.value.id, {}):  # TOL = 2 * consts.EPS
        c = src.const_modules[e.value.id][e.attr]
        return c if isinstance(c, tuple) else c.value
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and src.modules.get(e.value.id) == "math":
        return getattr(math, e.attr, None) if isinstance(getattr(math, e.attr, None), float) else None
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) \
            and src.modules.get(e.func.value.id) == "math" and e.func.attr in _MATH_FOLD and not e.keywords:
        args = [_constant(src, a) for a in e.args]
        try:
            return float(getattr(math, e.func.attr)(*args)) if None not in args else None
        except (ArithmeticError, ValueError, TypeError):
            return None
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "float" and len(e.args) == 1 \
            and not e.keywords and isinstance(e.args[0], ast.Constant) and isinstance(e.args[0].value, str):
        try:  # NEG_INF = float("-inf")
            return float(e.args[0].value)
        except ValueError:
            return None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _constant(src, e.operand)
        return -v if v is not None and not isinstance(v, tuple) else None
    if isinstance(e, ast.BinOp) and type(e.op) in _FOLD:
        a, b = _constant(src, e.left), _constant(src, e.right)
        if isinstance(a, tuple) or isinstance(b, tuple):
            return None
        try:
            return _FOLD[type(e.op)](a, b) if a is not None and b is not None else None
        except ArithmeticError:
            return None
    return None


def compile_python_kernel(path: Path, func: str, float_dtype: str,
                          params: Sequence[Type] | None = None, results: Sequence[Type] | None = None,
                          where: Location | None = None, signature_where: Location | None = None) -> Func:
    """The IR of `func` in the Python file at `path` (`where`: the manifest line naming it, for an error
    when the file has no such function; `signature_where`: the line of the signature giving params and
    results)."""
    src = load_source(path)
    if where is not None and func not in src.functions:
        raise KsbuildError(f"no function '{func}' in {path}", where,
                           hint=f"functions defined at the top level of {path.name}: "
                                f"{', '.join(src.functions) or 'none'}")
    kc = KernelCompiler(src, float_dtype)
    f = wrap_entry(kc, func, kc.compile(func, params, results, signature_where))
    return dataclasses.replace(f, defaults=_defaults(src, src.functions[func]))


def _defaults(src: Source, fn: ast.FunctionDef) -> tuple[tuple[str, object], ...]:
    """(name, value) of the parameters with a constant number or bool as their default (def f(x, scale=2.0)):
    the Python API fills them in when a call leaves them out."""
    given = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]  # (kernels take no keyword-only parameters)
    values = [(a.arg, _constant(src, d)) for a, d in zip(given, fn.args.defaults)]
    return tuple((name, v) for name, v in values if isinstance(v, (bool, int, float)))
