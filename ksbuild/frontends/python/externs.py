"""External C functions of a kernel file (ksbuild.extern, Knossos's edef): functions ksbuild calls but cannot see.

    @ksbuild.extern(sources=["bessel.c"], c_name="j0")     # both optional; c_name defaults to the Python name
    def bessel_j0(x: float) -> float:
        return scipy.special.j0(x)                            # the Python body: never compiled, run by the
                                                              # reference interpreter and when the file runs
    @bessel_j0.defjvp                                         # optional, as for ksbuild.custom_jvp (or defvjp)
    def bessel_j0_jvp(x: float, dx: float) -> tuple[float, float]: ...

An extern takes float, int and bool scalars and returns one float. A call of it is one extern_call equation
(prims/extern.py); with a rule, the custom_jvp / custom_vjp equation whose body is that one (custom_rules.py).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from ...codegen.viewmodel import C_KEYWORDS
from ...ir.builder import Builder
from ...ir.core import Func, Var
from .decorators import dev_decorator

SCALARS = ("float", "int", "bool")  # the argument annotations an extern takes
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp")  # .c compiles as C, the others as C++
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Extern:
    """An external C function: its C symbol and the user's files defining it (absolute paths)."""

    c_name: str
    sources: tuple[str, ...]
    where: ast.expr  # the decorator


def collect_externs(src) -> dict[str, Extern]:
    """name -> Extern for the functions of a parsed file decorated with @ksbuild.extern; located errors."""
    out = {}
    for name, fn in src.functions.items():
        for d in fn.decorator_list:
            if dev_decorator(src, d) == "extern":
                _check_signature(src, fn)
                out[name] = _extern(src, fn, d)
    return out


def _extern(src, fn: ast.FunctionDef, d: ast.expr) -> Extern:
    """The Extern a decorator (`@ksbuild.extern` or `@ksbuild.extern(sources=[...], c_name="...")`) declares."""
    call = d if isinstance(d, ast.Call) else ast.Call(d, [], [])
    if call.args or any(k.arg not in ("sources", "c_name") for k in call.keywords):
        raise src.error(d, "ksbuild.extern takes the keywords sources=[\"file.c\", ...] and c_name=\"symbol\" only")
    kw = {k.arg: k.value for k in call.keywords}
    c_name = fn.name
    if "c_name" in kw:
        node = kw["c_name"]
        c_name = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        if c_name is None or not C_IDENTIFIER.match(c_name) or c_name in C_KEYWORDS:
            raise src.error(node, f"c_name must be a C identifier (letters, digits and _, not first a digit, not a "
                                  f"C or C++ keyword), got {ast.unparse(node)}")
    return Extern(c_name, _sources(src, kw.get("sources")), d)


def _sources(src, node: ast.expr | None) -> tuple[str, ...]:
    """The source files a `sources=[...]` keyword lists, relative to the kernel file; each must exist."""
    if node is None:
        return ()
    if not isinstance(node, (ast.List, ast.Tuple)):
        raise src.error(node, "sources takes a list of file names: sources=[\"bessel.c\"]")
    out = []
    for e in node.elts:
        if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
            raise src.error(e, "sources takes a list of file names (strings), relative to this file")
        path = (src.path.parent / e.value).resolve()
        if path.suffix not in SOURCE_SUFFIXES:
            raise src.error(e, f"'{e.value}' is not a C or C++ file ({', '.join(SOURCE_SUFFIXES)})")
        if not path.is_file():
            raise src.error(e, f"no file '{e.value}' next to {src.path.name} (looked for {path})")
        out.append(str(path))
    return tuple(out)


def _check_signature(src, fn: ast.FunctionDef) -> None:
    """An extern takes float, int and bool scalars and returns one float: a located error otherwise."""
    for a in fn.args.args:
        if a.annotation is None:
            raise src.error(a, f"the argument '{a.arg}' of the external function '{fn.name}' has no annotation",
                            hint=f"annotate it: {a.arg}: float (or int, bool)")
        if not (isinstance(a.annotation, ast.Name) and a.annotation.id in SCALARS):
            raise src.error(a.annotation, f"the external function '{fn.name}' takes '{ast.unparse(a.annotation)}': "
                                          "external C functions take float, int and bool scalars only (tensors: "
                                          "not done)", hint="pass scalars and map the function with vmap")
    if not (isinstance(fn.returns, ast.Name) and fn.returns.id == "float"):
        raise src.error(fn.returns or fn, f"the external function '{fn.name}' must return one float "
                                          "(-> float): tensors, tuples and other types are not done")


# ---- compiling ----------------------------------------------------------------------------------------------------

def extern_params(kc, name: str) -> dict:
    """The params of an extern_call of the external function `name`."""
    decl = kc.src.externs[name]
    return {"c_name": decl.c_name, "name": name, "file": str(Path(kc.src.path).resolve()), "sources": decl.sources,
            "result": kc.float_dtype}


def extern_func(kc, fn: ast.FunctionDef, types) -> Func:
    """The function an external one is to ksbuild: one extern_call equation of its arguments."""
    from ...prims import PRIMS

    b = Builder(kc.src.loc(fn))
    params = [Var(t, a.arg) for t, a in zip(types, fn.args.args)]
    outs = b.bind(PRIMS["extern_call"], params, extern_params(kc, fn.name))
    return b.func(fn.name, params, list(outs))


def bind_extern(kc, b: Builder, name: str, atoms) -> tuple[Var, ...]:
    """A call of the external function `name` without its rules: one extern_call equation at the call."""
    from ...prims import PRIMS

    return b.bind(PRIMS["extern_call"], atoms, extern_params(kc, name))
